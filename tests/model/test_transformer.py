"""The backbone's RMSNorm and rotary embeddings in the activation dtype: numbers against a
float64 re-derivation from their definitions, and the bytes they move (FakeTensors)."""

from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost.traffic import TrafficCounter
from leviathan.model.transformer import RMSNorm, apply_rope, rope_tables


def _rotated_pairs_float64(x: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE from its definition: pair (x[2i], x[2i+1]) at position t turned by t * theta^(-2i/hd)."""
    *_, T, hd = x.shape
    out = torch.empty(x.shape, dtype=torch.float64)
    for i in range(hd // 2):
        for t in range(T):
            angle = t * theta ** (-2 * i / hd)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i], out[..., t, 2 * i + 1] = a * c - b * s, a * s + b * c
    return out


def test_rope_in_fp32_and_bf16_against_the_float64_rotation() -> None:
    """fp32 within fp32 rounding; bf16 stays bf16 and within two bf16 roundings (2^-7
    relative to the pair's norm, which a rotation keeps)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 12, 8, generator=gen)
    cos, sin = rope_tables(8, 12, 500.0)
    ref = _rotated_pairs_float64(x, 500.0)
    torch.testing.assert_close(apply_rope(x, cos, sin).double(), ref, rtol=1e-6, atol=1e-6)
    xb = x.bfloat16()
    out = apply_rope(xb, cos, sin)
    assert out.dtype == torch.bfloat16
    ref_b = _rotated_pairs_float64(xb, 500.0)
    pair_norm = ref_b.unflatten(-1, (-1, 2)).norm(dim=-1).repeat_interleave(2, -1)
    assert ((out.double() - ref_b).abs() <= 2**-7 * pair_norm + 1e-6).all()


def test_rmsnorm_runs_in_the_autocast_dtype_against_float64() -> None:
    """Under bf16 autocast the norm of an fp32 input comes out in bf16 (what the Linears after
    it take without a copy), within a bf16 rounding of x / rms(x) * w in float64; without
    autocast it stays fp32 to fp32 rounding."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 7, 32, generator=gen) * 3.0
    norm = RMSNorm(32, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(32, generator=gen) + 0.5)
    x64, w64 = x.double(), norm.weight.detach().double()
    ref = x64 / (x64.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * w64
    torch.testing.assert_close(norm(x).double(), ref, rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = norm(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=2**-7, atol=1e-3)


def test_bf16_rope_moves_under_20_bytes_per_element_each_way() -> None:
    """A flip and a multiply-add in bf16: forward ~15, backward ~18 bytes per element of q
    (the fp32 round trip through unbind/stack moved 48 and 52)."""
    with FakeTensorMode():
        x = torch.empty(4, 8, 128, 64, dtype=torch.bfloat16, requires_grad=True)
        cos, sin = rope_tables(64, 128, 10000.0)
        with TrafficCounter() as forward:
            y = apply_rope(x, cos, sin)
        with TrafficCounter() as backward:
            y.backward(torch.empty_like(y))
    assert forward.by_part()["all"] / x.numel() < 20
    assert backward.by_part()["all"] / x.numel() < 20

"""The roofline's FLOPs re-derived by hand from the model's shapes, its bound and MFU
arithmetic, and `leviathan config show` printing it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from leviathan.cost.roofline import (
    BANDWIDTH_EFFICIENCY,
    GEMM_EFFICIENCY,
    roofline,
)
from leviathan.gpus import gpu_model
from leviathan.model import model_config


def test_400m_parts_rederived_from_the_shapes() -> None:
    cfg = model_config("400m", "o200k_base", "leviathan")
    r = roofline(cfg, micro_batch=32, global_batch=512)
    parts = {p.name: p for p in r.parts}
    N, D, L, F, T = 32 * 512, cfg.d_model, cfg.n_layers, cfg.ffn_hidden, cfg.max_seq_len
    v_pad = math.ceil(cfg.vocab_size / 128) * 128
    assert v_pad % 128 == 0
    assert 0 <= v_pad - cfg.vocab_size < 128
    # per token forward: q, k, v, o (4 D^2) and SwiGLU (3 D F) multiply-adds, dense T x T attention
    assert parts["backbone"].flops == 3 * N * (2 * L * (4 * D * D + 3 * D * F) + 4 * T * D * L)
    # the fused loss: forward, the logits recomputed in backward, and the two gradient GEMMs
    assert parts["head+loss"].flops == 4 * 2 * N * v_pad * D
    # its bytes: G once in bf16 read by two GEMMs (6 per logit), the hidden states' reads
    # and dh (8 per element), the head's casts, padding and gradient (28 per element)
    assert parts["head+loss"].bytes == 6 * N * v_pad + 8 * N * D + 28 * v_pad * D
    # two of the four (forward, recomputed logits) are Triton tiles of 128 x 256, each
    # reading its 128 + 256 rows of D bf16 elements from L2: 85 FLOP per byte
    head = parts["head+loss"]
    assert head.tile_flops == 2 * 2 * N * v_pad * D
    tiles = (N // 128) * math.ceil(v_pad / 256)
    assert head.l2_bytes == 2 * tiles * (128 + 256) * D * 2
    assert head.tile_flops / head.l2_bytes == pytest.approx(128 * 256 / (128 + 256), rel=0.01)
    assert parts["optimizer"].flops == 0


def test_bound_and_mfu_follow_the_stated_efficiencies() -> None:
    """Per part: the matmuls' compute (the loss's Triton tiles at their compute or their L2
    reads, whichever is slower) or their own bytes (whichever binds), then the elementwise
    kernels' bytes at the bandwidth; MFU = model FLOPs / (time x peak)."""
    cfg = model_config("1.2b", "o200k_base", "tied")
    r = roofline(cfg, micro_batch=16, global_batch=512)
    h200 = gpu_model("H200")
    assert h200 is not None
    peak, bandwidth = h200.bf16_flops, h200.bandwidth * BANDWIDTH_EFFICIENCY
    assert h200.l2_bandwidth
    expected = 0.0
    for p in r.parts:
        tiles = max(p.tile_flops / (peak * GEMM_EFFICIENCY), p.l2_bytes / h200.l2_bandwidth)
        compute = (p.flops - p.tile_flops) / (peak * GEMM_EFFICIENCY) + tiles
        seconds = max(compute, p.matmul_bytes / bandwidth) + (p.bytes - p.matmul_bytes) / bandwidth
        assert p.seconds("H200") == pytest.approx(seconds)
        assert p.bound("H200") == ("compute" if compute >= p.bytes / bandwidth else "memory")
        expected += seconds
    assert r.mfu("H200") == pytest.approx(r.model_flops / (expected * peak))
    assert r.mfu("H200") <= GEMM_EFFICIENCY + 1e-9
    # the 1.2b head's tiles are bound by L2 on an H200: slower than at the GEMM peak
    head = r.part("head+loss")
    assert head.l2_bytes / h200.l2_bandwidth > head.tile_flops / (peak * GEMM_EFFICIENCY)


@pytest.mark.parametrize("variant", ["tied", "leviathan"])
def test_compiling_removes_only_elementwise_traffic(variant: str) -> None:
    cfg = model_config("400m", "o200k_base", variant)
    eager, fused = (roofline(cfg, 32, 512, fused=f) for f in (False, True))
    for a, b in zip(eager.parts, fused.parts, strict=True):
        assert a.flops == b.flops
        assert a.matmul_bytes == b.matmul_bytes
        assert b.bytes <= a.bytes
    assert fused.part("backbone").bytes < eager.part("backbone").bytes
    # the loss's kernels and AdamW are the same compiled (custom ops, no compile)
    assert fused.part("head+loss").bytes == eager.part("head+loss").bytes
    assert fused.part("optimizer").bytes == eager.part("optimizer").bytes
    assert fused.mfu("H100") > eager.mfu("H100")


def test_config_show_prints_the_studys_roofline() -> None:
    from leviathan.commands.config import roofline_section
    from leviathan.study.config import resolve

    root = Path(__file__).resolve().parents[2]
    text = roofline_section(resolve([root / "config" / "paper.yaml"], root=root))
    for label in ("200m/o200k_base/tied", "1.2b/o200k_base/leviathan", "1.2b/o200k_base/tied"):
        assert f"{label:<34} MFU <=" in text
    assert "1.2b/o200k_base/leviathan          input" in text

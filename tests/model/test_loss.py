import pytest
import torch
import torch.nn.functional as F

from leviathan.device import forced_policy
from leviathan.model import build_model, loss_cpu, model_config
from leviathan.model import loss as loss_module
from leviathan.model.loss import (
    linear_cross_entropy,
    matmul_weight,
    token_losses,
    token_losses_and_greedy,
)


@pytest.mark.parametrize("chunk_elems", [7, 50, 1 << 20])
def test_matches_full_cross_entropy_with_gradients(chunk_elems: int) -> None:
    torch.manual_seed(0)
    h = torch.randn(23, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 11, (23,))
    t[[3, 9]] = -100
    ours = linear_cross_entropy(h, w, t, chunk_elems)
    ref = F.cross_entropy(h @ w.t(), t, ignore_index=-100)
    torch.testing.assert_close(ours, ref.float(), rtol=1e-6, atol=1e-6)
    g_ours = torch.autograd.grad(ours * 3.0, (h, w))
    g_ref = torch.autograd.grad(ref * 3.0, (h, w))
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    per_token = token_losses(h, w, t, chunk_elems)
    torch.testing.assert_close(
        per_token, F.cross_entropy(h @ w.t(), t, reduction="none").float(), rtol=1e-6, atol=1e-6
    )


def test_model_loss_equals_logits_cross_entropy_for_tied_and_untied() -> None:
    for variant in ("tied", "leviathan"):
        torch.manual_seed(0)
        model = build_model(model_config("micro", "gpt2", variant, vocab_size=300))
        ids = torch.randint(0, 300, (2, 17))
        loss = model.loss(ids[:, :-1], ids[:, 1:], chunk_elems=1000)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        ref = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        ref_grads = torch.autograd.grad(ref, list(model.parameters()))
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_no_grad_path_gives_the_same_loss() -> None:
    torch.manual_seed(0)
    h = torch.randn(19, 8, requires_grad=True)
    w = torch.randn(13, 8, requires_grad=True)
    t = torch.randint(0, 13, (19,))
    t[4] = -100
    with_grad = linear_cross_entropy(h, w, t, 50)
    with torch.no_grad():
        without = linear_cross_entropy(h, w, t, 50)
    assert not without.requires_grad
    torch.testing.assert_close(without, with_grad.detach(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", ["tied", "leviathan", "albert"])
def test_residual_stream_is_fp32_under_bf16_autocast_for_every_variant(variant: str) -> None:
    model = build_model(model_config("micro", "gpt2", variant, vocab_size=300))
    ids = torch.randint(0, 300, (2, 9))
    seen = []
    model.backbone.blocks[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.hidden(ids)
    assert seen == [torch.float32]


@pytest.mark.parametrize("policy", ["cpu", "gpu", "gpu-groups"])
def test_head_gradient_matches_float64_reference(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every way of forming d weight gives the float64 cross-entropy's gradients within fp32
    rounding (rtol 1e-5: sums of a few hundred fp32 terms reassociated): the CPU rule (in-place
    addmm_ per chunk of 10 rows), the GPU rule (one G^T H product, head padded 300 -> 384)
    and the GPU rule where G does not fit (a chunk budget of 3,000 logits: groups of 56 rows,
    one product each)."""
    if policy == "gpu-groups":
        monkeypatch.setattr(loss_module, "device_chunk_elems", lambda device, elems: elems)
    torch.manual_seed(0)
    h64 = torch.randn(200, 16, dtype=torch.float64)
    w64 = torch.randn(300, 16, dtype=torch.float64) * 0.3
    t = torch.randint(0, 300, (200,))
    t[::7] = -100
    h, w = h64.float().requires_grad_(), w64.float().requires_grad_()
    with forced_policy(policy.removesuffix("-groups")):
        if policy == "gpu-groups":
            step = 3000 // 384
            assert loss_module._head_grad_rows(h.device, 3000, matmul_weight(w), step, 200) == 56
        ours = linear_cross_entropy(h, w, t, chunk_elems=3000)
        g_ours = torch.autograd.grad(ours, (h, w))
    h64.requires_grad_(), w64.requires_grad_()
    ref = F.cross_entropy(h64 @ w64.t(), t, ignore_index=-100)
    g_ref = torch.autograd.grad(ref, (h64, w64))
    torch.testing.assert_close(ours.double(), ref, rtol=1e-6, atol=1e-6)
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-7)


def test_cpu_tiles_over_tokens_and_classes_match_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU rule's tiles when neither the tokens nor the classes fit one tile (tiles of 64
    tokens x 46 classes: 4 row blocks, the last of 8 tokens; 7 class tiles, the last of 24),
    fp32 as training runs them: the loss, both gradients, the per-token losses and the argmax
    of the float64 cross-entropy of all logits at once."""
    monkeypatch.setattr(loss_cpu, "TILE_ROWS", 64)
    assert loss_cpu._tile_shape(200, 300, 3000) == (64, 46)
    gen = torch.Generator().manual_seed(5)
    h64 = torch.randn(200, 16, dtype=torch.float64, generator=gen)
    w64 = torch.randn(300, 16, dtype=torch.float64, generator=gen) * 0.5
    logits64 = h64 @ w64.t()
    t = torch.randint(0, 300, (200,), generator=gen)
    t[::4] = logits64.argmax(-1)[::4]
    t[::9] = -100
    h, w = h64.float().requires_grad_(), w64.float().requires_grad_()
    with forced_policy("cpu"):
        ours = linear_cross_entropy(h, w, t, chunk_elems=3000)
        g_ours = torch.autograd.grad(ours * 2.0, (h, w))
        losses, greedy = token_losses_and_greedy(h.detach(), w.detach(), t, chunk_elems=3000)
    h64.requires_grad_(), w64.requires_grad_()
    ref = F.cross_entropy(h64 @ w64.t(), t, ignore_index=-100)
    g_ref = torch.autograd.grad(ref * 2.0, (h64, w64))
    torch.testing.assert_close(ours.double(), ref, rtol=1e-6, atol=1e-6)
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-7)
    ref_losses = F.cross_entropy(logits64, t, ignore_index=-100, reduction="none")
    torch.testing.assert_close(losses.double(), ref_losses, rtol=1e-5, atol=1e-5)
    valid = t != -100
    assert torch.equal(greedy[valid], (logits64.argmax(-1) == t)[valid])
    assert not greedy[~valid].any()
    assert int(greedy.sum()) >= 40


def test_compiled_cpu_loss_is_one_node_with_the_eager_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torch.compile the CPU rule's loss is one opaque op (no graph break, no tile loop
    unrolled into the graph) that gives the eager loss and gradients bit for bit."""
    monkeypatch.setattr(loss_cpu, "TILE_ROWS", 64)
    gen = torch.Generator().manual_seed(6)
    h = torch.randn(150, 16, generator=gen)
    w = torch.randn(300, 16, generator=gen) * 0.5
    t = torch.randint(0, 300, (150,), generator=gen)
    t[::7] = -100

    def loss_and_grads(fn):  # type: ignore[no-untyped-def]
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        with forced_policy("cpu"):
            loss = fn(hh, ww, t, 3000)
        return (loss, *torch.autograd.grad(loss * 3.0, (hh, ww)))

    torch._dynamo.reset()
    with forced_policy("cpu"):
        explained = torch._dynamo.explain(linear_cross_entropy)(
            h.clone().requires_grad_(), w.clone().requires_grad_(), t, 3000
        )
    assert explained.graph_break_count == 0, explained.break_reasons
    ops = [str(n.target) for g in explained.graphs for n in g.graph.nodes]
    assert "leviathan.tiled_cross_entropy.default" in ops, ops
    assert not any("mm" in op for op in ops), ops  # the tiles' matmuls stay inside the op
    torch._dynamo.reset()
    compiled = torch.compile(linear_cross_entropy, backend="aot_eager", fullgraph=True)
    for ours, eager in zip(
        loss_and_grads(compiled), loss_and_grads(linear_cross_entropy), strict=True
    ):
        assert torch.equal(ours, eager)


def test_gpu_rule_pads_the_head_and_gives_the_unpadded_loss() -> None:
    """Under the GPU rule the head enters the matmuls padded to a multiple of 128 rows (300 ->
    384) with the padded logits masked: the loss and gradients of the unpadded CPU-rule
    computation within fp32 reassociation, d weight of the weight's own shape."""
    torch.manual_seed(0)
    h = torch.randn(40, 8, requires_grad=True)
    w = torch.randn(300, 8, requires_grad=True)
    t = torch.randint(0, 300, (40,))
    t[5] = -100
    with forced_policy("gpu"):
        assert matmul_weight(w).shape == (384, 8)
        assert not matmul_weight(w)[300:].any()
        padded = linear_cross_entropy(h, w, t, chunk_elems=1000)
        per_token = token_losses(h, w, t, chunk_elems=1000)
        g_padded = torch.autograd.grad(padded, (h, w))
    with forced_policy("cpu"):
        plain = linear_cross_entropy(h, w, t, chunk_elems=1000)
        g_plain = torch.autograd.grad(plain, (h, w))
    torch.testing.assert_close(padded, plain, rtol=1e-6, atol=1e-6)
    for a, b in zip(g_padded, g_plain, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(
        per_token, F.cross_entropy(h @ w.t(), t, reduction="none"), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("policy", ["cpu", "gpu"])
def test_losses_and_greedy_match_float64_cross_entropy_and_argmax(policy: str) -> None:
    """What lm-eval's requests are scored by: per-token loss (0 where ignored) and whether the
    target is the argmax, against float64 logits of the whole batch at once (chunks of 7 rows;
    under the GPU rule the padded head rows must never win the argmax)."""
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(50, 8, generator=gen)
    w = torch.randn(300, 8, generator=gen)
    logits = h.double() @ w.double().t()
    t = torch.randint(0, 300, (50,), generator=gen)
    t[::3] = logits.argmax(-1)[::3]  # a third of the targets are the argmax
    t[4] = -100
    with forced_policy(policy):
        losses, greedy = token_losses_and_greedy(h, w, t, chunk_elems=7 * 300)
        plain = token_losses(h, w, t, chunk_elems=7 * 300)
    ref = F.cross_entropy(logits, t, reduction="none")
    torch.testing.assert_close(losses.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(losses, plain, rtol=0, atol=0)
    valid = t != -100
    assert torch.equal(greedy[valid], (logits.argmax(-1) == t)[valid])
    assert int(greedy.sum()) >= 17

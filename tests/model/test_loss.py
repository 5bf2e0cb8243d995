import pytest
import torch
import torch.nn.functional as F

from leviathan.model import build_model, model_config
from leviathan.model.loss import linear_cross_entropy, token_losses


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

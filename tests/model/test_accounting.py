import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from leviathan.cli import main
from leviathan.model import build_model, model_config
from leviathan.model.accounting import account, account_model
from leviathan.report.cost_checks import cost_checks
from leviathan.scales import SCALES


@pytest.mark.parametrize("variant", ["tied", "albert", "flat_mlp", "factored_mlp", "leviathan"])
def test_forward_flops_agree_with_torch_flop_counter(variant: str) -> None:
    """Our per-token count x T equals what torch counts for a forward pass on T distinct ids
    (the math SDPA path, so attention is counted too), plus LEV's spline work that is not a
    matmul and torch does not count."""
    cfg = model_config("micro", "gpt2", variant)
    model = build_model(cfg)
    T = cfg.max_seq_len
    ids = torch.randperm(cfg.vocab_size)[:T].unsqueeze(0)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(ids)
    acc = account_model(model, T)
    spline = sum(
        m.extra_flops_per_id() for m in model.io.input.modules() if hasattr(m, "extra_flops_per_id")
    )
    assert counter.get_total_flops() + spline * T == acc.forward_flops * T


def test_big_scales_are_counted_on_meta_without_memory() -> None:
    acc = account(model_config("1.2b", "o200k_base", "leviathan"))
    assert acc.input_params == 2_253_952
    assert acc.head_params == 200019 * 2048


def test_paper_parameter_claims_reproduce_within_one_percent() -> None:
    checks = {c.claim: c for c in cost_checks()}
    for claim, check in checks.items():
        if "FLOPs" not in claim:
            assert check.ok, (claim, check.paper, check.ours)
    flops = next(c for c in checks.values() if "FLOPs" in c.claim)
    assert 0 < flops.ours < flops.paper
    assert flops.note  # reported as a difference, with the reason


def test_params_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["params", "--scale", "400m", "--vocab", "o200k", "--variant", "all", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    v = out["variants"]
    assert set(v) == {"tied", "untied", "albert", "flat_mlp", "factored_mlp", "leviathan"}
    assert v["untied"]["total_params"] == v["tied"]["total_params"] + 200019 * 1024
    assert v["leviathan"]["input_params"] == 1_205_376 + 512 * 1024
    assert v["leviathan"]["overhead_vs_tied"]["params"] > 0


def test_params_cli_text_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--scale", "micro", "--vocab", "gpt2"]) == 0
    text = capsys.readouterr().out
    assert "leviathan" in text
    assert "tied" in text
    assert "train GFLOP/tok" in text
    assert main(["params", "--scale", "micro", "--vocab", "bert"]) == 2
    assert "unknown vocabulary 'bert'" in capsys.readouterr().err
    assert main(["params", "--check-paper"]) == 0
    assert "LEV parameters at D=2048" in capsys.readouterr().out


@pytest.mark.parametrize("scale", list(SCALES))
def test_params_shows_each_lev_choice_against_the_method_count(
    scale: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`leviathan params`' RECON rows (docs/method.md §6), at every scale, against LEV's count
    written out from its parts: codebooks k b d, heads h (d d + d) with the seed bias, LayerNorm
    2 h d, splines h d kappa r, one learned scale per head and coordinate; h r per unit of D."""
    from leviathan.model.config import model_config as mc

    cfg = mc(scale, "o200k_base", "leviathan")
    lev = cfg.lev
    k, d, h, K, r = lev.n_digits, lev.d_seed, lev.n_heads, lev.n_knots, lev.rank
    base = k * cfg.lev_base * d + h * (d * d + d) + 2 * h * d + h * d * K * r
    assert main(["params", "--scale", scale, "--vocab", "o200k_base", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {row["choice"]: row for row in doc["lev_recon_choices"]}
    assert rows["defaults"]["constant"] == base and rows["defaults"]["per_d"] == h * r
    assert doc["variants"]["leviathan"]["input_params"] == base + h * r * cfg.d_model
    assert rows["seed_bias=False"]["constant"] == base - h * d
    assert rows["basis=normalised"]["constant"] == base
    assert rows["knot_scale=learned"]["constant"] == base + h * d

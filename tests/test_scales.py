"""The named scales against what is stated outside the code: README.md's table of scales, the
recipe of docs/method.md §4 and the paper's reported numbers (config/paper_reported.yaml), with the
parameters counted from the built model itself (on the meta device: no memory at any scale)."""

from __future__ import annotations

import pytest
import torch

from leviathan.model import build_model, model_config
from leviathan.report.paper import Paper
from leviathan.scales import SCALES
from leviathan.train.config import train_config

# README.md, "Scales": D, layers, heads, FFN width, context, and the tied parameters at o200k
# (to 0.1M; the CI scales give none there)
README = {
    "micro": (64, 2, 4, 192, 64, None),
    "tiny": (256, 4, 4, 704, 256, None),
    "200m": (768, 7, 12, 2048, 512, 203.2e6),
    "400m": (1024, 16, 16, 2752, 512, 407.2e6),
    "1.2b": (2048, 14, 16, 5504, 512, 1_118.0e6),
    "3b": (3072, 24, 24, 8192, 512, 3_332.5e6),
    "7b": (4096, 32, 32, 11008, 512, 7_295.5e6),
}
PAPER_SCALES = ["200m", "400m", "1.2b"]
PAPER = Paper.load()


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def built(scale: str, vocab: str, variant: str) -> torch.nn.Module:
    return build_model(model_config(scale, vocab, variant), device="meta")


def test_the_readme_lists_every_scale() -> None:
    assert list(SCALES) == list(README)


@pytest.mark.parametrize("name", list(README))
def test_each_scale_builds_the_readmes_shape_and_size(name: str) -> None:
    d_model, n_layers, n_heads, ffn, context, tied_params = README[name]
    model = model_config(name, "o200k_base", "tied")
    shape = (model.d_model, model.n_layers, model.n_heads, model.ffn_hidden, model.max_seq_len)
    assert shape == (d_model, n_layers, n_heads, ffn, context)
    assert train_config(name, "o200k_base", "tied").context == context
    if tied_params is not None:
        assert params(built(name, "o200k_base", "tied")) == pytest.approx(tied_params, abs=0.05e6)


def test_tiny_has_the_readmes_16m_parameters() -> None:
    # README.md, "`tiny` on a laptop": D=256, 16M parameters (its config trains gpt2 cells)
    assert params(built("tiny", "gpt2", "tied")) == pytest.approx(16e6, abs=0.5e6)


# LEV's parameters written out from docs/method.md §2 (codebooks k b d_seed; per head W_l and
# c_l d_seed^2 + d_seed, LayerNorm 2 d_seed, splines d_seed kappa r; W_out h r D) at README's
# LEV shapes (k = 3 digits; gpt2: base 37)
CI_LEV = {
    "micro": 3 * 37 * 16 + 2 * (16 * 16 + 16 + 2 * 16 + 16 * 8 * 16) + 2 * 16 * 64,
    "tiny": 3 * 37 * 64 + 4 * (64 * 64 + 64 + 2 * 64 + 64 * 16 * 32) + 4 * 32 * 256,
}


@pytest.mark.parametrize("name", list(CI_LEV))
def test_the_ci_scales_shrink_lev_to_the_readmes_shape(name: str) -> None:
    lev = built(name, "gpt2", "leviathan")
    assert params(lev.io.input) == CI_LEV[name]


@pytest.mark.parametrize("name", [s for s in README if s not in CI_LEV])
def test_every_other_scale_has_the_papers_lev(name: str) -> None:
    """The paper's "1.21M + 512 D" (config/paper_reported.yaml: 1,205,376 + 512 D exactly)."""
    cost = PAPER.cost()
    d_model = README[name][0]
    lev = built(name, "o200k_base", "leviathan")
    assert params(lev.io.input) == cost["lev_params_fixed"] + cost["lev_params_per_d"] * d_model


@pytest.mark.parametrize("name", PAPER_SCALES)
def test_the_papers_scales_train_on_the_papers_recipe(name: str) -> None:
    train = train_config(name, "o200k_base", "leviathan")
    assert train.total_tokens == PAPER.main(name)["tokens"]  # 4.2B, 8.4B, 24.1B
    # docs/method.md §4: 512 sequences per optimizer step (262,144 tokens)
    assert (train.global_batch, train.tokens_per_step) == (512, 262_144)
    # "about 21 tokens per parameter" (docs/method.md §4), per tied parameter at o200k
    assert train.total_tokens / params(built(name, "o200k_base", "tied")) == pytest.approx(
        21, abs=0.6
    )


def test_the_scales_beyond_the_paper_train_on_the_readmes_recipe() -> None:
    """README.md, "Scales": 66.6B and 146B tokens, ~20 per tied parameter; 2048 and 4096
    sequences per step (1M and 2M tokens); peak learning rates 1.6e-4 and 1.2e-4."""
    for name, tokens, batch, step_tokens, lr in [
        ("3b", 66_600_000_000, 2048, 2**20, 1.6e-4),
        ("7b", 146_000_000_000, 4096, 2**21, 1.2e-4),
    ]:
        train = train_config(name, "o200k_base", "leviathan")
        assert (train.total_tokens, train.global_batch, train.lr) == (tokens, batch, lr)
        assert train.tokens_per_step == step_tokens
        tied = params(built(name, "o200k_base", "tied"))
        assert train.total_tokens / tied == pytest.approx(20, abs=0.05)


def test_the_layer_counts_meet_the_papers_parameter_numbers() -> None:
    """README.md, "Scales": 16 layers at 400M give the paper's 611M untied (ours 612.0M); at
    1.2B, 14 layers give its +0.20% parameters of Leviathan over tied and 21.6 training tokens
    per (tied) parameter."""
    untied = params(built("400m", "o200k_base", "untied"))
    assert untied == pytest.approx(PAPER.ablation("400m")["untied"]["params"], rel=0.01)
    assert untied == pytest.approx(612.0e6, abs=0.05e6)
    tied, lev = (params(built("1.2b", "o200k_base", v)) for v in ("tied", "leviathan"))
    assert lev / tied - 1 == pytest.approx(PAPER.cost("1.2b")["param_overhead"], abs=0.00005)
    assert PAPER.main("1.2b")["tokens"] / tied == pytest.approx(21.6, abs=0.05)


def test_unknown_scale_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown scale 'huge': use one of micro, tiny, 200m"):
        train_config("huge", "gpt2", "tied")

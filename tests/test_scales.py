"""One record per scale: the model, the training config and the plan read the same numbers."""

from __future__ import annotations

import pytest

from leviathan.model import model_config
from leviathan.scales import RECIPE_FIELDS, SCALES, get_scale
from leviathan.train.config import train_config

# docs/method.md §2: the RECON LEV shape that gives the paper's "1.21M + 512 D" (k=3, d_seed,
# h, kappa, r), written out here as the reference a scale's `lev` overrides.
SPEC_LEV = {"n_digits": 3, "d_seed": 128, "n_heads": 8, "n_knots": 16, "rank": 64}


@pytest.mark.parametrize("name", list(SCALES))
def test_model_and_training_config_come_from_the_scale_record(name: str) -> None:
    scale = get_scale(name)
    model = model_config(name, "gpt2", "leviathan")
    assert (model.d_model, model.n_layers, model.n_heads, model.ffn_hidden) == (
        scale.d_model,
        scale.n_layers,
        scale.n_heads,
        scale.ffn_hidden,
    )
    assert model.max_seq_len == scale.context
    expected_lev = {**SPEC_LEV, **scale.lev}  # the paper's scales override nothing
    assert {k: getattr(model.lev, k) for k in expected_lev} == expected_lev
    train = train_config(name, "gpt2", "leviathan")
    assert {k: getattr(train, k) for k in RECIPE_FIELDS} == scale.recipe()


def test_the_papers_scales_keep_the_papers_recipe() -> None:
    budgets = {"200m": 4_200_000_000, "400m": 8_400_000_000, "1.2b": 24_100_000_000}
    for name, tokens in budgets.items():
        s = get_scale(name)
        assert (s.total_tokens, s.context, s.global_batch) == (tokens, 512, 512)
        assert dict(s.lev) == {}, f"{name}: the paper's scales use the method's LEV"


def test_unknown_scale_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown scale 'huge': use one of micro, tiny, 200m"):
        train_config("huge", "gpt2", "tied")

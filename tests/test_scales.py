"""One record per scale: the model, the training config and the plan read the same numbers."""

from __future__ import annotations

import pytest

from leviathan.model import model_config
from leviathan.scales import RECIPE_FIELDS, SCALES, get_scale
from leviathan.train.config import train_config


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
    assert all(getattr(model.lev, k) == v for k, v in scale.lev.items())
    train = train_config(name, "gpt2", "leviathan")
    assert {k: getattr(train, k) for k in RECIPE_FIELDS} == scale.recipe()


def test_the_papers_scales_keep_the_papers_recipe() -> None:
    budgets = {"200m": 4_200_000_000, "400m": 8_400_000_000, "1.2b": 24_100_000_000}
    for name, tokens in budgets.items():
        s = get_scale(name)
        assert (s.total_tokens, s.context, s.global_batch, dict(s.lev)) == (tokens, 512, 512, {})


def test_unknown_scale_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown scale 'huge': use one of micro, tiny, 200m"):
        train_config("huge", "gpt2", "tied")

"""A cell's recipe against its scale's default, as the report's `recipe` column and `leviathan
config show` name it: the recorded training config's differences (`lev.n_heads=4, lr=1e-3`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leviathan.train.config import NOT_IDENTITY, TRAIN_IDENTITY, train_config
from leviathan.values import flatten


def recipe_differences(default: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
    """The cell's training config (TrainConfig.to_dict, as recorded) against its scale's
    default: {key: the cell's value} for every recipe key that differs; model overrides by
    their dotted path (`lev.n_heads`). The identity and memory knobs (micro_batch) are left out."""
    skip = {*TRAIN_IDENTITY, *NOT_IDENTITY, "model_overrides"}
    out = {k: v for k, v in cell.items() if k not in skip and (k not in default or default[k] != v)}
    ours = flatten(cell.get("model_overrides") or {})
    theirs = flatten(default.get("model_overrides") or {})
    out.update({k: v for k, v in ours.items() if theirs.get(k, _MISSING) != v})
    return dict(sorted(out.items()))


_MISSING = object()


def format_number(value: Any) -> str:
    """A value as a recipe shows it: the shorter of `%g` and `1e-3` forms for floats."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value).replace(" ", "") if isinstance(value, list | tuple) else str(value)
    plain = f"{value:g}"
    mantissa, _, exp = f"{value:.6e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    sci = f"{mantissa}e{int(exp)}"
    return sci if len(sci) < len(plain) else plain


def recipe_text(differences: Mapping[str, Any]) -> str:
    """`lev.n_heads=4, lr=1e-3`; "" for the scale's default recipe."""
    return ", ".join(f"{k}={format_number(v)}" for k, v in differences.items())


def scale_default(config_train: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """The default recipe of a recorded cell's scale in this study: the scale's recipe
    (leviathan.scales) with config.train.<scale>, for its base variant, vocab and seed."""
    scale = str(record["scale"])
    return train_config(
        scale,
        str(record["vocab"]),
        str(record["variant"]),
        seed=int(record.get("seed") or 0),
        **(config_train.get(scale) or {}),
    ).to_dict()

"""A cell's resolved configs: the training config it runs with (config.train over its scale's
recipe, its named variant and tag, its own overrides), and the checkpoint that config writes.

The plan (`leviathan.cost.plan`), the jobs' resources (`.cluster`: a GPU job's preemption
grace follows from its checkpoint's size) and the training command (`.launch`) take a cell's
configs from here; this module imports none of them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from leviathan.cells import Cell, config_cells
from leviathan.checkpoint.files import checkpoint_bytes
from leviathan.study.sweep import cell_overrides, cell_variant
from leviathan.train.config import train_config
from leviathan.train.recipe import recipe_differences, recipe_text, scale_default

LARGEST = ("o200k_base", "untied")  # the largest checkpoint of a scale outside any study


def train_overrides(config: Mapping[str, Any], cell: Cell) -> dict[str, Any]:
    """config.train[<scale>], the cell's named variant and tag, then config.train[<cell key>]
    (one cell's own overrides): leviathan.study.sweep.cell_overrides."""

    return cell_overrides(config, cell.scale, cell.variant, cell.key)


def cell_train_config(config: Mapping[str, Any], cell: Cell) -> Any:
    """The training config a cell runs with (its base variant's, with train_overrides)."""

    base = cell_variant(config, cell.variant).base
    return train_config(
        cell.scale, cell.vocab, base, seed=cell.seed, **train_overrides(config, cell)
    )


def cell_recipe(config: Mapping[str, Any], cell: Any) -> str:
    """The recipe text of a configured cell (what `leviathan config show` lists)."""

    record = cell_train_config(config, cell).to_dict()
    return recipe_text(recipe_differences(scale_default(config.get("train") or {}, record), record))


def cell_checkpoint_bytes(config: Mapping[str, Any], cell: Cell) -> int:
    from leviathan.model.accounting import account

    tc = cell_train_config(config, cell)
    return checkpoint_bytes(account(tc.model_config(), tc.context).total_params)


def largest_checkpoint_bytes(config: Mapping[str, Any], scale: str) -> int:
    """Bytes of the largest checkpoint of a cell of `scale` (the configured studies' cells, or
    the scale's largest possible cell when no study has it); cached by the config's JSON, as the
    workflow asks once per job of the scale."""
    return _largest_checkpoint_bytes(json.dumps(config, sort_keys=True, default=str), scale)


@functools.lru_cache(maxsize=64)
def _largest_checkpoint_bytes(config_json: str, scale: str) -> int:
    config = json.loads(config_json)
    studies = config.get("studies") or {}
    mine = [c for c in config_cells(config) if c.scale == scale] if studies else []
    return max(cell_checkpoint_bytes(config, c) for c in mine or [Cell(scale, *LARGEST, 0, "")])

"""Evaluation along training (config.evaluate.along): which kept checkpoints of which cells the
workflow evaluates, known from the config before any training (runtime.checkpoint.keep_at's steps up to
the cell's max_steps, leviathan.train.schedule.keep_steps).

Each kept checkpoint gets the `val` evaluation (loss and the token- and word-frequency buckets on
the configured sample, the eval_val rule's code path); a cell's curve ends with its final
evaluation (`val.json`) where the schedule does not keep the final step. Every (scale, vocab,
seed) group with a tied baseline is then compared (leviathan.eval.along). The plan counts these
jobs (leviathan.cost.plan_eval.along_evals: one val job per kept checkpoint) beside the cell's
other evaluations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.run import along_enabled


def along_steps(config: Mapping[str, Any], cell: Cell) -> list[int]:
    """The kept steps of a cell (runtime.checkpoint.keep_at up to its max_steps), ascending."""
    from leviathan.study.resolve import cell_train_config
    from leviathan.train.config import workflow_runtime
    from leviathan.train.schedule import keep_steps

    spec = workflow_runtime(config.get("runtime")).checkpoint.keep_at
    return keep_steps(spec, cell_train_config(config, cell).max_steps)


def along_points(config: Mapping[str, Any], cell: Cell) -> list[str]:
    """The evaluation outputs of a cell's curve along training, by step: one per kept step, and
    the final evaluation last where the schedule does not keep the final step."""
    from leviathan.study.resolve import cell_train_config

    steps = along_steps(config, cell)
    points = [layout.along_output(cell, s) for s in steps]
    if cell_train_config(config, cell).max_steps not in steps:
        points.append(layout.eval_output(cell, "val"))
    return points


def along_groups(
    config: Mapping[str, Any], groups: Mapping[tuple[str, str, int], Sequence[Cell]]
) -> dict[tuple[str, str, int], list[list[str]]]:
    """For each sample-efficiency group (tied first), each cell's along_points; none when off."""
    if not along_enabled(config):
        return {}
    return {key: [along_points(config, c) for c in cells] for key, cells in groups.items()}

"""The shapes the kernels meet in the shipped studies: each training cell's micro-batch and
the largest evaluation batch, at the cell's vocabulary and width, LEV's shape where the cell
has LEV. Read from the study configs themselves (`config/*.yaml`, resolved as Snakemake
resolves them), so a config that changes a micro-batch changes what is checked."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from leviathan.compiled.kernels import Shape

STUDIES = ("config/paper.yaml", "config/scale.yaml")  # the studies that run on GPUs


def _padded(vocab: int) -> int:
    from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE

    return vocab + -vocab % HEAD_ROWS_MULTIPLE


def study_shapes(configfile: str | Path, root: str | Path = ".") -> list[Shape]:
    """Every (cell, job) shape of one study: training at its micro-batch, evaluation at
    the study's largest evaluation batch (full-context windows: an upper bound)."""
    from leviathan.cells import config_cells
    from leviathan.cost.plan import eval_batch
    from leviathan.study.config import resolve
    from leviathan.study.resolve import cell_train_config

    config = resolve([configfile], root=root)
    shapes = []
    for cell in config_cells(config):
        tc = cell_train_config(config, cell)
        cfg = tc.model_config()
        lev = getattr(cfg, "lev", None) if cell.variant == "leviathan" else None
        jobs = {"train": tc.micro_batch, "eval": eval_batch(config)}
        for job, batch in jobs.items():
            label = f"{Path(configfile).stem}:{cell.scale}/{cell.vocab}/{cell.variant} {job}"
            tokens = batch * tc.context
            shapes.append(
                Shape(label, tokens, cfg.vocab_size, _padded(cfg.vocab_size), cfg.d_model, lev)
            )
    return shapes


def planned_shapes(studies: Iterable[str] = STUDIES, root: str | Path = ".") -> list[Shape]:
    """The shapes of every shipped GPU study, each distinct shape once."""
    seen: dict[tuple[object, ...], Shape] = {}
    for study in studies:
        for shape in study_shapes(Path(root) / study, root):
            key = (shape.tokens, shape.vocab, shape.d_model, shape.lev)
            seen.setdefault(key, shape)
    return list(seen.values())

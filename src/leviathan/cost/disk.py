"""A study's disk before it runs: corpus text, token shards, step, final and kept checkpoints,
DVC's cache and what the run folders hold set aside, from the same counters as the plan
(`leviathan.cost.plan`); callable by any script that checks a machine before a study runs."""

from __future__ import annotations

import configparser
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import config_cells
from leviathan.checkpoint.files import CHECKPOINTS
from leviathan.cost.plan import CellPlan, plan_cell
from leviathan.cost.units import size_text
from leviathan.study.corpus_size import corpus_bytes, vocab_budgets
from leviathan.train.config import workflow_runtime
from leviathan.vocab import get_vocab


@dataclass(frozen=True)
class StudyDisk:
    """Bytes on disk of a study at its peak (every cell trained, its evaluation done, each
    cell's step checkpoints still there) and once every cell is final."""

    corpus_text: int  # training text fetched (UTF-8; stored zstd-compressed: an upper bound)
    shards: int  # train.bin of every vocabulary (val.bin and counts are small beside them)
    step_checkpoints: int  # runtime.checkpoint.keep_last step checkpoints per cell, at most
    final_checkpoints: int  # checkpoints/final/ of every cell (weights + AdamW state)
    dvc_cache: int  # DVC's copy of data/, the final and kept checkpoints (0 where it links)
    steps_dropped_at_final: bool = False  # runtime.checkpoint.drop_steps_at_final
    set_aside: int = 0  # set-aside folders already in the study's run folders (kept, not planned)
    kept_checkpoints: int = (
        0  # checkpoints/kept/ of every cell (runtime.checkpoint.keep_at: weights only)
    )

    @property
    def total(self) -> int:
        """The peak: a cell holds its step checkpoints until its final one is written, and
        cells may train at once, so every cell's step checkpoints may be on disk together."""
        return (
            self.corpus_text
            + self.shards
            + self.step_checkpoints
            + self.final_checkpoints
            + self.dvc_cache
            + self.set_aside
            + self.kept_checkpoints
        )

    @property
    def at_end(self) -> int:
        """Once every cell is final: the step checkpoints gone where the config drops them."""
        return self.total - (self.step_checkpoints if self.steps_dropped_at_final else 0)

    def line(self) -> str:
        """One line for a plan or a rehearsal: the peak, each part, and the end state."""
        steps = (
            "removed as each cell is final: runtime.checkpoint.drop_steps_at_final"
            if self.steps_dropped_at_final
            else "kept after each cell is final: runtime.checkpoint.drop_steps_at_final is off"
        )
        return (
            f"disk at most {size_text(self.total)} (peak), {size_text(self.at_end)} once every cell is "
            f"final: corpus text {size_text(self.corpus_text)}, shards {size_text(self.shards)}, step "
            f"checkpoints {size_text(self.step_checkpoints)} ({steps}), final checkpoints "
            f"{size_text(self.final_checkpoints)}, "
            + (
                f"kept checkpoints {size_text(self.kept_checkpoints)} (runtime.checkpoint.keep_at, versioned "
                "with the runs), "
                if self.kept_checkpoints
                else ""
            )
            + f"DVC cache {size_text(self.dvc_cache)} "
            + (
                "(a copy of data/ and the final and kept checkpoints: .dvc/config's cache.type "
                "copies)"
                if self.dvc_cache
                else "(linked into the workspace, no second copy: .dvc/config's cache.type)"
            )
            + (
                f", set aside {size_text(self.set_aside)} (checkpoints of other configs or damaged "
                "ones, kept in the run folders: remove them when no longer needed)"
                if self.set_aside
                else ""
            )
        )


def study_disk(
    config: Mapping[str, Any], plans: list[CellPlan] | None = None, mfu: float | None = None
) -> StudyDisk:
    """The disk a study needs, from the same counters as its plan (`plans`: plan_cell of
    every cell, where the caller has them). Callable by any script that checks a machine
    before a study runs (e.g. a rehearsal)."""
    from leviathan.data.tokenizers import token_dtype  # the data layer: off the GPU image's path

    plans = (
        plans if plans is not None else [plan_cell(config, c, mfu) for c in config_cells(config)]
    )
    budgets = vocab_budgets(config)
    margin = 1 + float((config.get("corpus") or {})["size_margin"])
    text = max(corpus_bytes(config, budgets).values())  # fetched once for every vocabulary
    shards = sum(
        math.ceil(b * margin) * token_dtype(get_vocab(v).n_vocab).itemsize
        for v, b in budgets.items()
    )
    steps = sum(p.checkpoint_bytes * (p.checkpoints_on_disk - 1) for p in plans)
    final = sum(p.checkpoint_bytes for p in plans)
    kept = sum(p.kept_bytes for p in plans)
    cache = text + shards + final + kept if dvc_cache_copies() else 0
    dropped = workflow_runtime(config.get("runtime")).checkpoint.drop_steps_at_final
    aside = sum(set_aside_bytes(Path(layout.run_dir(p.cell))) for p in plans)
    return StudyDisk(text, shards, steps, final, cache, dropped, aside, kept)


# what a run sets aside and keeps (train/checkpoint.py, train/telemetry.py)
SET_ASIDE_GLOBS = ("*.stale-*", f"{CHECKPOINTS}/*.damaged-*", "metrics.torn-*")


def set_aside_bytes(run_dir: Path) -> int:
    """Bytes of what a run folder holds set aside (checkpoints of another config or data,
    damaged checkpoints, torn metrics lines): on disk, outside the plan's own figures."""
    files = (
        f
        for pattern in SET_ASIDE_GLOBS
        for found in run_dir.glob(pattern)
        for f in ([found] if found.is_file() else found.rglob("*"))
    )
    return sum(f.stat().st_size for f in files if f.is_file())


def dvc_cache_copies(dvc_config: Path | None = None) -> bool:
    """Whether DVC may copy outputs into its cache (a second copy on disk): its `cache.type`
    (default the project's .dvc/config) is unset (DVC's default `reflink,copy`: a copy where
    the filesystem has no reflinks) or names `copy`. Links (hardlink, symlink) never copy."""

    parser = configparser.ConfigParser()
    parser.read(dvc_config or layout.repo_root() / ".dvc" / "config")
    cache_types = parser.get("cache", "type", fallback="reflink,copy").strip('"').split(",")
    return "copy" in {t.strip() for t in cache_types}

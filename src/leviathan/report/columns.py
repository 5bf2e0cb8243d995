"""The values the tables' columns read: fields of the evaluation outputs and checkpoint states,
and the evaluation columns that the main and metrics tables share (one builder per column).

`eval_sources` names one field of each cell's evaluation output; `compared` declares a value of
a cell group against its tied reference (group "a") over the same field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.results import (
    LAMBADA_PPL,
    VAL_BPB,
    VAL_LOSS,
    VAL_TARGETS,
    WIKITEXT_PPL,
    lm_eval_metric,
)
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec
from leviathan.report.context import ReportInputs
from leviathan.report.paper import PAPER_TASKS
from leviathan.report.table import Table


def eval_output(c: Cell, evaluation: str) -> str:
    return layout.eval_output(c, evaluation)


def eval_sources(
    cells: Iterable[Cell], evaluation: str, pointer: str, group: str = "a"
) -> tuple[Source, ...]:
    """One field (`pointer`) of each cell's `evaluation` output, in `group`."""
    return tuple(Source(eval_output(c, evaluation), pointer, group) for c in cells)


def compared(
    op: str, ref: Iterable[Cell], cmp: Iterable[Cell], evaluation: str, pointer: str
) -> ValueSpec:
    """A paired op (leviathan.report.cellmap.PAIRED) of `cmp`'s field against `ref`'s."""
    return ValueSpec(
        op,
        eval_sources(ref, evaluation, pointer, "a") + eval_sources(cmp, evaluation, pointer, "b"),
    )


def state_sources(cells: Iterable[Cell], group: str = "a") -> tuple[Source, ...]:
    """The recorded model config of each cell's final checkpoint (what params/FLOPs count)."""
    return tuple(Source(layout.final_marker(c), "/model_config", group) for c in cells)


def lm_eval_tasks(inp: ReportInputs, docs: DocumentCache) -> dict[str, Any]:
    """The lm-eval tasks of the main study's (else any cell's) evaluations (task -> its metrics), {} if none ran."""
    groups = inp.study("main") or inp.all_cells()
    if "lm_eval" not in inp.evals or not groups:
        return {}
    first = next(iter(groups.values()))[0]
    tasks = docs.get(eval_output(first, "lm_eval"))["results"]["tasks"]
    return {name: task.get("metrics", {}) for name, task in tasks.items()}


def has_lambada_ppl(tasks: Mapping[str, Any]) -> bool:
    return "perplexity,none" in tasks.get("lambada_openai", {})


def accuracy_tasks(
    inp: ReportInputs, docs: DocumentCache
) -> tuple[list[str], list[str], list[str]]:
    """(the paper's tasks that ran, every task that reports acc, the tasks the mean averages:
    the paper's that ran, or all of them if none did)."""
    tasks_run = {
        name for name, metrics in lm_eval_tasks(inp, docs).items() if "acc,none" in metrics
    }
    paper_tasks = [t for t in PAPER_TASKS if t in tasks_run]
    tasks = paper_tasks + sorted(tasks_run - set(PAPER_TASKS))
    return paper_tasks, tasks, paper_tasks or tasks


def accuracy_sources(
    cells: Iterable[Cell],
    tasks: Iterable[str],
    group: str = "a",
    metric: Callable[[str], str] = lambda task: "acc,none",
) -> tuple[Source, ...]:
    """Each task's accuracy (`metric` of the task) in each cell's lm-eval output."""
    cells = list(cells)
    return tuple(
        s
        for task in tasks
        for s in eval_sources(cells, "lm_eval", lm_eval_metric(task, metric(task)), group)
    )


# evaluation column -> (its format, the evaluation that yields it)
EVAL_COLUMNS = {
    "val_loss": ("loss", "val"),
    "val_ppl": ("ppl", "val"),
    "val_bpb": ("loss", "val"),
    "val_targets": ("int", "val"),
    "wikitext_ppl": ("ppl", "wikitext"),
    "lambada_ppl": ("ppl", "lambada"),
    "downstream_mean_acc": ("points", "downstream"),
    "val_loss_gain": ("pct", "val"),
    "val_ppl_gain": ("pct", "val"),
    "wikitext_ppl_gain": ("pct", "wikitext"),
    "lambada_ppl_gain": ("pct", "lambada"),
    "downstream_gain_points": ("dpoints", "downstream"),
}


class EvalColumns:
    """The evaluation columns the enabled evaluations yield, each built by one function
    whichever table shows it (main: a configuration, its seeds averaged; metrics: one seed)."""

    def __init__(self, inp: ReportInputs, docs: DocumentCache) -> None:
        tasks = lm_eval_tasks(inp, docs)
        self.averaged = accuracy_tasks(inp, docs)[2] if tasks else []  # the downstream mean's
        self.yielded = {"val"}
        self.yielded |= {"wikitext"} if "wikitext" in inp.evals else set()
        self.yielded |= {"lambada"} if has_lambada_ppl(tasks) else set()
        self.yielded |= {"downstream"} if self.averaged else set()

    def formats(self, names: Iterable[str]) -> dict[str, str]:
        """Column -> its format, for those of `names` that the evaluations yield, in order."""
        return {n: EVAL_COLUMNS[n][0] for n in names if EVAL_COLUMNS[n][1] in self.yielded}

    def _values(self) -> dict[str, Callable[[Sequence[Cell]], ValueSpec]]:
        acc = self.averaged
        return {
            "val_loss": lambda c: ValueSpec("mean", eval_sources(c, "val", VAL_LOSS)),
            "val_ppl": lambda c: ValueSpec("exp", eval_sources(c, "val", VAL_LOSS)),
            "val_targets": lambda c: ValueSpec("mean", eval_sources(c, "val", VAL_TARGETS)),
            "val_bpb": lambda c: ValueSpec("mean", eval_sources(c, "val", VAL_BPB)),
            "wikitext_ppl": lambda c: ValueSpec("mean", eval_sources(c, "wikitext", WIKITEXT_PPL)),
            "lambada_ppl": lambda c: ValueSpec("mean", eval_sources(c, "lm_eval", LAMBADA_PPL)),
            "downstream_mean_acc": lambda c: ValueSpec("pct", accuracy_sources(c, acc)),
        }

    def _gains(self) -> dict[str, Callable[[Sequence[Cell], Sequence[Cell]], ValueSpec]]:
        acc = self.averaged
        return {
            "val_loss_gain": lambda tied, c: compared("gain", tied, c, "val", VAL_LOSS),
            "val_ppl_gain": lambda tied, c: compared("exp_gain", tied, c, "val", VAL_LOSS),
            "wikitext_ppl_gain": lambda tied, c: compared(
                "gain", tied, c, "wikitext", WIKITEXT_PPL
            ),
            "lambada_ppl_gain": lambda tied, c: compared("gain", tied, c, "lm_eval", LAMBADA_PPL),
            "downstream_gain_points": lambda tied, c: ValueSpec(
                "diff_pct", accuracy_sources(tied, acc, "a") + accuracy_sources(c, acc, "b")
            ),
        }

    def set_values(self, t: Table, row: str, cells: Sequence[Cell]) -> None:
        """The row's evaluation values, for the table's columns among them."""
        for name, value in self._values().items():
            if name in t.columns:
                t.set(row, name, value(cells))

    def set_gains(self, t: Table, row: str, tied: Sequence[Cell], cells: Sequence[Cell]) -> None:
        """The row's gains over `tied` (the same scale and vocabulary), for the table's columns."""
        for name, gain in self._gains().items():
            if name in t.columns:
                t.set(row, name, gain(tied, cells))

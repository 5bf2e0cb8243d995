"""The core of the layout: cells and studies, the checkout, configuration, locks, manifests,
runs, and jobs' logs and benchmarks (`leviathan.layout` names every path)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from leviathan.checkpoint.files import CHECKPOINTS, FINAL, STATE

PathLike = str | os.PathLike[str]


class CellLike(Protocol):
    scale: Any
    vocab: Any
    variant: Any
    seed: Any
    results: Any  # the study's results key (`results_key`)


# the cell of a rule's pattern: its paths hold Snakemake's wildcards
WILDCARDS: CellLike = SimpleNamespace(
    scale="{scale}", vocab="{vocab}", variant="{variant}", seed="{seed}", results="{results}"
)


# ---------------------------------------------------------------- studies
def results_key(study_name: str) -> str:
    """The directory under results/runs, results/eval, results/export and results/report of a
    study's results: the config's `study_name`. Two studies in one clone never share a file;
    the workflow refuses a second config that names a study already claimed (`study_record`)."""
    if study_name == Path(DVC_METRICS_DIR).name:
        raise ValueError(
            f"study_name {study_name!r} is reserved (results/report/{study_name}/): rename it"
        )
    return study_name


def config_results_key(config: Mapping[str, Any]) -> str:
    """`results_key` of a workflow config: its `study_name`, or, where it gives none, its
    corpus's name (every shipped config names its study)."""
    return results_key(config.get("study_name") or config["corpus"]["name"])


STUDY_RECORD = "study.json"


def study_record(results: str) -> Path:
    """What a study's results folder belongs to (its config file, corpus and cells), written by
    its first run and compared by every later one (leviathan.study.claim)."""
    return Path(RUNS_ROOT) / results / STUDY_RECORD


# ---------------------------------------------------------------- the checkout
def repo_root() -> Path:
    """The checkout this package runs from (src/leviathan/layout/ -> repository root)."""
    return Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- configuration
DEFAULT_CONFIG = "config/config.yaml"
# the keys `dvc exp run -S` sets, which DVC's stages apply over their study's file (dvc.yaml)
DVC_OVERRIDES = "config/dvc_overrides.yaml"
CONFIG_SCHEMA = "workflow/schemas/config.schema.yaml"
PAPER_REPORTED = "config/paper_reported.yaml"

# ---------------------------------------------------------------- locks
LOCK = ".lock"  # one process per run directory or output (leviathan.lock)


def lock_file(target: PathLike, folder: bool) -> Path:
    """The lock file of a directory (`folder`: `<dir>/.lock`) or of a file to be written
    (`.<name>.lock` beside it)."""
    p = Path(target)
    return p / LOCK if folder else p.with_name(f".{p.name}{LOCK}")


# ---------------------------------------------------------------- manifests
MANIFEST_SUFFIX = ".json"


def manifest_path(artifact: PathLike) -> Path:
    """Path of the manifest that describes `artifact` (`<artifact>.json`, beside it)."""
    p = Path(artifact)
    return p.with_name(p.name + MANIFEST_SUFFIX)


PROVENANCE_ROOT = "results/provenance"


def provenance_diff(sha256: str) -> Path:
    """The saved uncommitted changes of a dirty checkout, named by their sha256 (one file per
    distinct content, shared by every manifest that names it)."""
    return Path(PROVENANCE_ROOT) / f"{sha256}.diff"


REPORT_DIR = "results/report"
# every study's per-cell JSONs under <study>/: one row each of `dvc metrics show`
DVC_METRICS_DIR = f"{REPORT_DIR}/metrics"


# ---------------------------------------------------------------- runs and checkpoints
RUNS_ROOT = "results/runs"
METRICS = "metrics.jsonl"  # the trainer's log (kind = start | train | val | end)


def cell_key(cell: CellLike) -> str:
    """`<scale>/<vocab>/<variant>/seed<k>`: a cell's name and the tail of its directories."""
    return f"{cell.scale}/{cell.vocab}/{cell.variant}/seed{cell.seed}"


def record_cell_key(record: Mapping[str, Any]) -> str:
    """The key of the cell a record (a checkpoint's, an evaluation's) names in its fields: its
    `cell_variant` (a named variant or a tagged cell) where it records one, else its variant."""
    fields = {k: record.get(k) for k in ("scale", "vocab", "variant", "seed")}
    fields["variant"] = record.get("cell_variant") or fields["variant"]
    return cell_key(SimpleNamespace(**fields))


def parse_cell_key(key: str) -> tuple[str, str, str, int]:
    """(scale, vocab, variant, seed) of a cell key: the inverse of cell_key."""
    parts = key.split("/")
    if len(parts) != 4 or not parts[3].startswith("seed") or not parts[3][4:].isdigit():
        raise ValueError(
            f"{key!r}: expected SCALE/VOCAB/VARIANT/seedN, e.g. 400m/o200k_base/leviathan/seed0"
        )
    return parts[0], parts[1], parts[2], int(parts[3][4:])


def run_dir(cell: CellLike) -> str:
    return f"{RUNS_ROOT}/{cell.results}/{cell_key(cell)}"


def final_marker(cell: CellLike) -> str:
    """The file whose existence says a cell is trained (its final checkpoint's state)."""
    return f"{run_dir(cell)}/{CHECKPOINTS}/{FINAL}/{STATE}"


def run_of(marker: PathLike) -> str:
    """The run directory of a final marker: the inverse of final_marker."""
    tail = f"/{CHECKPOINTS}/{FINAL}/{STATE}"
    m = Path(marker).as_posix()
    if not m.endswith(tail):
        raise ValueError(f"{marker}: not a final checkpoint's {STATE} (<run>{tail})")
    return m[: -len(tail)]


def metrics_file(run: PathLike) -> Path:
    return Path(run) / METRICS


OUT_OF_MEMORY = "out_of_memory.json"  # the last out-of-memory refusal (its micro_batch, step)


def out_of_memory_file(run: PathLike) -> Path:
    """The record of a run's last out-of-memory error: a workflow retry of the same
    micro_batch reads it and stops at once; a run that starts removes it."""
    return Path(run) / OUT_OF_MEMORY


EXIT = "exit.json"  # how the run's last attempt ended (leviathan.train.exit_record)


def exit_file(run: PathLike) -> Path:
    """The record of how a run's last attempt ended (finished, preempted, stopped, failed),
    written by the process holding its lock; removed as the next attempt starts."""
    return Path(run) / EXIT


def tensorboard_dir(run: PathLike) -> Path:
    """TensorBoard event files of a run (runtime.tensorboard)."""
    return Path(run) / "tensorboard"


def dvclive_dir(run: PathLike) -> Path:
    """DVCLive's directory of a run (runtime.dvclive)."""
    return Path(run) / "dvclive"


# ---------------------------------------------------------------- jobs
LOGS_ROOT = "logs"
BENCHMARK_SUFFIX = ".benchmark.tsv"


def log_file(step: str, *parts: str) -> str:
    """A job's log: `logs/<step>/<parts...>.log`."""
    return f"{LOGS_ROOT}/{'/'.join((step, *parts))}.log"


def cell_log(step: str, cell: CellLike, *parts: str) -> str:
    """A cell job's log: `logs/<step>/<study>/<cell>[/<parts...>].log`."""
    return log_file(step, str(cell.results), cell_key(cell), *parts)


def attempts_log(log: str | os.PathLike[str]) -> Path:
    """The history of a job's log `log` (`<name>.attempts.log` beside it): every attempt of the
    job appended, where Snakemake removes `log` itself before each attempt."""
    path = Path(log)
    return path.with_name(f"{path.name.removesuffix('.log')}.attempts.log")


def benchmark_path(directory: str, rule: str, tag: str = "") -> str:
    """Where a job of `rule` writes its Snakemake benchmark (`tag` tells apart jobs of one rule
    in one directory): beside the job's outputs, so the file lives in (and travels with) the
    DVC stage output that holds them."""
    return f"{directory}/{rule}{'.' + tag if tag else ''}{BENCHMARK_SUFFIX}"


def benchmark_rule(path: str) -> str:
    """The rule whose benchmark file `path` is."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(BENCHMARK_SUFFIX):
        raise ValueError(f"{path}: not a benchmark file (*{BENCHMARK_SUFFIX})")
    return name.split(".", 1)[0]


# what `leviathan.layout` exports from here: every public name (tests/test_layout.py)
__all__ = [
    "BENCHMARK_SUFFIX",
    "CONFIG_SCHEMA",
    "CellLike",
    "DEFAULT_CONFIG",
    "DVC_METRICS_DIR",
    "DVC_OVERRIDES",
    "EXIT",
    "LOCK",
    "LOGS_ROOT",
    "MANIFEST_SUFFIX",
    "METRICS",
    "OUT_OF_MEMORY",
    "PAPER_REPORTED",
    "PROVENANCE_ROOT",
    "PathLike",
    "REPORT_DIR",
    "RUNS_ROOT",
    "STUDY_RECORD",
    "WILDCARDS",
    "attempts_log",
    "benchmark_path",
    "benchmark_rule",
    "cell_key",
    "cell_log",
    "config_results_key",
    "dvclive_dir",
    "exit_file",
    "final_marker",
    "lock_file",
    "log_file",
    "manifest_path",
    "metrics_file",
    "out_of_memory_file",
    "parse_cell_key",
    "provenance_diff",
    "record_cell_key",
    "repo_root",
    "results_key",
    "run_dir",
    "run_of",
    "study_record",
    "tensorboard_dir",
]

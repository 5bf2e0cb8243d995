"""Where every artifact of the pipeline lives: the one home of its paths and file names.

The rules (through workflow/rules/common.smk, their scripts through `params:`), the trainer's
checkpoints, the evaluation's checkpoint loader, the report and the audit all take their paths
from here. Paths are relative to the working directory (the repository root for the workflow),
readable and stable; <cell> is <scale>/<vocab>/<variant>/seed<k>, and <study> is the
config's `study_name`, or its corpus's name where it gives none (`config_results_key`): every
study writes its results under a name of its own, and shares only its corpus's data:

    config/config.yaml, config/paper_reported.yaml   the default config, the paper's figures
    data/corpus/<corpus>/             raw text splits <split>.jsonl.zst (+ manifests)
    data/tokens/<corpus>/<vocab>/     train.bin, val.bin, counts.npy, word_counts.json (+ manifests)
    results/runs/<study>/<cell>/      checkpoints/ (named by leviathan.checkpoint.files),
                                      metrics.jsonl, out_of_memory.json
    results/eval/<study>/<cell>/      <evaluation>.json (val, wikitext, lm_eval),
                                      lm_eval.samples.jsonl, lm_eval_harness/,
                                      along/val_step<N>.json (evaluate.along)
    results/eval/<study>/<scale>/<vocab>/  sample_efficiency_seed<k>.json, along_seed<k>.json
    results/export/<study>/<cell>/    transformers checkpoint (`leviathan export`)
    results/report/<study>/           tables/, figures/, plots/
    results/report/metrics/<study>/   one DVC metrics JSON per cell (every study's: `dvc metrics show`)
    results/provenance/<sha256>.diff  a dirty checkout's uncommitted changes (manifests name it)
    logs/<step>/...                   one log per job (a cell's: logs/<step>/<study>/<cell>...)
A job's Snakemake benchmark file sits beside its outputs: <dir>/<rule>[.<tag>].benchmark.tsv.

A cell is anything with `scale`, `vocab`, `variant`, `seed` and `results` (its <study>)
attributes: a
`leviathan.cells.Cell`, Snakemake's wildcards of a cell rule, or `WILDCARDS` (the
rules' patterns). Functions of cells and of the workflow's directories return str (what
Snakemake and DVC name); functions of the files inside a run, a checkpoint or an output
directory take that directory and return a Path. A rule's script gets the directories it needs
from the rule's `params:`, computed from its input or output files by the inverses here
(`run_of`, `dir_of`), never by counting a path's parents.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from leviathan.checkpoint.files import CHECKPOINTS, FINAL, STATE, kept_dir, step_dir

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
    """The checkout this package runs from (src/leviathan/ -> repository root)."""
    return Path(__file__).resolve().parents[2]


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


# ---------------------------------------------------------------- data
CORPUS_ROOT = "data/corpus"
TOKENS_ROOT = "data/tokens"
SPLITS = ("train", "val")
CORPUS_SUFFIX = ".jsonl.zst"
SHARD_SUFFIX = ".bin"
COUNTS = "counts.npy"  # per-id token counts of the train split
WORD_COUNTS = "word_counts.json"  # training-corpus counts of the validation text's words


def corpus_dir(corpus: str) -> str:
    return f"{CORPUS_ROOT}/{corpus}"


def corpus_file(directory: PathLike, split: str) -> Path:
    """One split of a corpus directory: `<directory>/<split>.jsonl.zst`."""
    return Path(directory) / f"{split}{CORPUS_SUFFIX}"


FETCH_STATE = ".fetch-state.json"  # a fetch in progress: its completed parts (resume point)
PARTIAL_SUFFIX = ".partial"  # a split being fetched: `.<split>.jsonl.zst.partial`


def fetch_state(directory: PathLike) -> Path:
    """Where an unfinished fetch records its last complete part (removed once done)."""
    return Path(directory) / FETCH_STATE


def partial_corpus_file(directory: PathLike, split: str) -> Path:
    """A split while it is fetched (whole parts up to the length its fetch state records)."""
    return Path(directory) / f".{split}{CORPUS_SUFFIX}{PARTIAL_SUFFIX}"


EVAL_DATA_ROOT = "data/eval"  # the evaluations' datasets, fetched by the data step
EVAL_DATA_SOURCE = "source.json"  # what a fetched dataset is and holds (written last)
EVAL_DATA_PROGRESS = ".fetched.json"  # its splits fetched so far (kept: a rerun skips them)


def eval_data_dir(key: str) -> Path:
    """One evaluation's fetched dataset (`key`: `wikitext` or `lm_eval/<task>`)."""
    return Path(EVAL_DATA_ROOT) / key


def eval_data_source(key: str) -> Path:
    return eval_data_dir(key) / EVAL_DATA_SOURCE


def eval_data_split(key: str, split: str) -> Path:
    """One split of a fetched dataset, in the official schema: `<dir>/<split>.parquet`."""
    return eval_data_dir(key) / f"{split}.parquet"


def tokens_dir(corpus: str, vocab: str) -> str:
    return f"{TOKENS_ROOT}/{corpus}/{vocab}"


def shard_path(directory: PathLike, split: str) -> Path:
    """One token shard of a tokens directory: `<directory>/<split>.bin`."""
    return Path(directory) / f"{split}{SHARD_SUFFIX}"


def shards(directory: str) -> dict[str, str]:
    """The token shards of a tokens directory, by split."""
    return {split: str(shard_path(directory, split)) for split in SPLITS}


def token_files(directory: str, word_counts: bool = False) -> dict[str, str]:
    """What tokenizing (and counting words) writes into a tokens directory, by role:
    train, val (the shards), counts and, with `word_counts`, word_counts."""
    files = shards(directory)
    files["counts"] = f"{directory}/{COUNTS}"
    if word_counts:
        files["word_counts"] = f"{directory}/{WORD_COUNTS}"
    return files


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


# ---------------------------------------------------------------- evaluation
EVAL_ROOT = "results/eval"
LM_EVAL_SAMPLES_SUFFIX = ".samples.jsonl"
LM_EVAL_HARNESS = "lm_eval_harness"  # lm-eval's own --output_path layout


def eval_dir(cell: CellLike) -> str:
    return f"{EVAL_ROOT}/{cell.results}/{cell_key(cell)}"


def eval_output(cell: CellLike, evaluation: str) -> str:
    """The JSON an evaluation (val, wikitext, lm_eval) of this cell writes."""
    return f"{eval_dir(cell)}/{evaluation}.json"


def eval_cell_key(output: PathLike) -> str | None:
    """The key of the cell whose evaluation directory holds `output` (None if it is not in one):
    the inverse of eval_output, on any path that ends like it (`.../eval/<study>/<cell>/<file>`,
    or `<cell>/along/<file>`: along_output)."""
    parent = Path(output).parent
    parts = (parent.parent if parent.name == ALONG else parent).parts
    if len(parts) < 6 or parts[-6] != Path(EVAL_ROOT).name:
        return None
    return "/".join(parts[-4:])


def lm_eval_samples(output: PathLike) -> Path:
    """The per-sample log beside an lm-eval result JSON (`lm_eval.json` -> `lm_eval.samples.jsonl`)."""
    out = Path(output)
    return out.with_name(out.stem + LM_EVAL_SAMPLES_SUFFIX)


def lm_eval_harness_dir(output: PathLike) -> Path:
    """lm-eval's own output directory beside an lm-eval result JSON."""
    return Path(output).parent / LM_EVAL_HARNESS


def eval_partial(output: PathLike) -> Path:
    """The running sums of an unfinished evaluation beside its output (removed when it is done)."""
    out = Path(output)
    return out.with_name(f".{out.stem}.partial.npz")


DAMAGED_SUFFIX = ".damaged"


def damaged(path: PathLike) -> Path:
    """Where a file that cannot be read back is set aside (`<name>.damaged`, kept for a look)."""
    p = Path(path)
    return p.with_name(p.name + DAMAGED_SUFFIX)


def lm_eval_cache(output: PathLike, key: str) -> Path:
    """lm-eval's request cache (its `use_cache` prefix) of an unfinished evaluation beside its
    output: one per checkpoint and settings (`key`), removed when the evaluation is done."""
    out = Path(output)
    return out.with_name(f".{out.stem}.cache-{key[:16]}")


SAMPLE_EFFICIENCY_PREFIX = "sample_efficiency_"


def sample_efficiency_dir(results: str, scale: str, vocab: str) -> str:
    return f"{EVAL_ROOT}/{results}/{scale}/{vocab}"


def sample_efficiency_name(seed: int | str) -> str:
    return f"{SAMPLE_EFFICIENCY_PREFIX}seed{seed}"


def sample_efficiency_path(results: str, scale: str, vocab: str, seed: int | str) -> str:
    return f"{sample_efficiency_dir(results, scale, vocab)}/{sample_efficiency_name(seed)}.json"


def sample_efficiency_group(path: PathLike) -> tuple[str, str, str]:
    """(scale, vocab, seed<k>) of a sample-efficiency file: the inverse of sample_efficiency_path."""
    p = Path(path)
    return p.parent.parent.name, p.parent.name, p.stem.removeprefix(SAMPLE_EFFICIENCY_PREFIX)


def is_sample_efficiency(path: PathLike) -> bool:
    return Path(path).name.startswith(SAMPLE_EFFICIENCY_PREFIX)


# ---------------------------------------------------------------- evaluation along training
ALONG = "along"  # evaluate.along: the val evaluation of every kept checkpoint of a cell
ALONG_PREFIX = f"{ALONG}_"


def kept_checkpoint(cell: CellLike, step: int | str) -> str:
    """A cell's kept checkpoint of step `step` (runtime.checkpoint.keep_at)."""
    return str(step_dir(kept_dir(f"{run_dir(cell)}/{CHECKPOINTS}"), int(step)))


def along_output(cell: CellLike, step: int | str) -> str:
    """The val evaluation of a cell's kept checkpoint of step `step`."""
    return f"{eval_dir(cell)}/{ALONG}/val_step{step}.json"


def along_name(seed: int | str) -> str:
    return f"{ALONG_PREFIX}seed{seed}"


def along_path(results: str, scale: str, vocab: str, seed: int | str) -> str:
    """A (scale, vocab, seed) group's evaluations along training, compared with tied's."""
    return f"{sample_efficiency_dir(results, scale, vocab)}/{along_name(seed)}.json"


def along_group(path: PathLike) -> tuple[str, str, str]:
    """(scale, vocab, seed<k>) of an along-training file: the inverse of along_path."""
    p = Path(path)
    return p.parent.parent.name, p.parent.name, p.stem.removeprefix(ALONG_PREFIX)


def is_along(path: PathLike) -> bool:
    return Path(path).name.startswith(ALONG_PREFIX)


# ---------------------------------------------------------------- export
EXPORT_ROOT = "results/export"
MODEL_CARD = "README.md"  # the Hugging Face Hub's name for it


def export_dir(cell: CellLike) -> str:
    return f"{EXPORT_ROOT}/{cell.results}/{cell_key(cell)}"


# ---------------------------------------------------------------- report
REPORT_DIR = "results/report"
# every study's per-cell JSONs under <study>/: one row each of `dvc metrics show`
DVC_METRICS_DIR = f"{REPORT_DIR}/metrics"


STATUS_FILE = "status.rst"


def report_dir(results: str) -> str:
    """A study's report: tables/, figures/, plots/ (only its own)."""
    return f"{REPORT_DIR}/{results}"


def tables_dir(results: str) -> str:
    return f"{report_dir(results)}/tables"


def figures_dir(results: str) -> str:
    return f"{report_dir(results)}/figures"


def plots_dir(results: str) -> str:
    return f"{report_dir(results)}/plots"


def status_file(results: str) -> str:
    """A study's status (what its run shows and what not), which the HTML report's first page
    includes (leviathan.report.status, workflow/report/workflow.rst)."""
    return f"{report_dir(results)}/{STATUS_FILE}"


def html_report(results: str) -> str:
    """A study's HTML report (Snakemake's --report; `leviathan report html`)."""
    return f"{report_dir(results)}/report.html"


def report_zip(results: str) -> str:
    """A study's browsable Snakemake report (`--report`; DVC's report stage writes it)."""
    return f"{report_dir(results)}/report.zip"


def dvc_metrics_dir_of(results: str) -> str:
    """A study's DVC metrics directory (the report removes stale files in it, no other)."""
    return f"{DVC_METRICS_DIR}/{results}"


TABLE_FORMATS = ("csv", "md", "tex")
PLAIN_TABLE_FORMATS = ("csv", "md")  # tables without a LaTeX rendering (paper_check, resources)
FIGURE_FORMATS = ("png", "pdf")
# The report's figures, each `<figures_dir>/<name>.<format>`: drawn by leviathan.report.figures
# (recon and lev_health by report.lev_figures, along by report.along_figure). Named here, not
# beside the drawing code, so that reading them (the workflow's parse) imports no plotting library.
# figure -> the report table it needs (None: drawn for every study): a study without that table
# (no ablation study, no evaluation along training, ...) gets no such figure, not an empty panel
FIGURE_TABLES: dict[str, str | None] = {
    "loss_curves": "sample_efficiency",
    "frequency": "frequency",
    "vocabulary": "vocabulary",
    "ablation": "ablation",
    "training": None,
    "along": "sample_efficiency_along",
    "recon": "recon",
    "lev_health": None,
}
FIGURE_NAMES = tuple(FIGURE_TABLES)


def report_figures(tables: Collection[str]) -> tuple[str, ...]:
    """The figures a study's report draws, given the names of the tables it builds."""
    return tuple(n for n, needs in FIGURE_TABLES.items() if needs is None or needs in tables)


def table_files(
    out_dir: PathLike, name: str, formats: tuple[str, ...] = TABLE_FORMATS
) -> dict[str, Path]:
    """A table's files by format: `<out_dir>/<name>.<format>`."""
    return {fmt: Path(out_dir) / f"{name}.{fmt}" for fmt in formats}


def figure_files(out_dir: PathLike, name: str) -> dict[str, Path]:
    return table_files(out_dir, name, FIGURE_FORMATS)


def dvc_metrics_file(out_dir: PathLike, cell_key: str) -> Path:
    """A cell's DVC metrics file: `<out_dir>/<scale>/<vocab>/<variant>/seed<k>.json`."""
    return Path(out_dir) / f"{cell_key}.json"


def dvc_metrics_dir(metrics_file: PathLike, cell_key: str) -> Path:
    """The `out_dir` that `dvc_metrics_file` put `metrics_file` (cell `cell_key`'s) in."""
    return Path(metrics_file).parents[cell_key.count("/")]


def plot_file(out_dir: PathLike, name: str) -> Path:
    return Path(out_dir) / f"{name}.csv"


def dir_of(file: PathLike) -> str:
    """The directory of a file that sits directly in one of the layout's directories (a corpus
    split, a token shard, a table, a figure, plot data)."""
    return Path(file).parent.as_posix()


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

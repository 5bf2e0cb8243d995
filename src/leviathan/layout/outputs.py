"""Where a study's outputs live: evaluations (along training too), exports and the report."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from leviathan.checkpoint.files import CHECKPOINTS, kept_dir, step_dir
from leviathan.layout.base import DVC_METRICS_DIR, REPORT_DIR, CellLike, PathLike, cell_key, run_dir

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
    includes (leviathan.report.status_page, workflow/report/workflow.rst)."""
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


# a table's caption in the HTML report (Snakemake's report() reads it): written with the table
CAPTION_FORMAT = "rst"
TABLE_FORMATS = ("csv", "md", "tex", CAPTION_FORMAT)
# tables without a LaTeX rendering (paper_check, resources)
PLAIN_TABLE_FORMATS = ("csv", "md", CAPTION_FORMAT)
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


# what `leviathan.layout` exports from here: every public name (tests/test_layout.py)
__all__ = [
    "ALONG",
    "ALONG_PREFIX",
    "CAPTION_FORMAT",
    "DAMAGED_SUFFIX",
    "EVAL_ROOT",
    "EXPORT_ROOT",
    "FIGURE_FORMATS",
    "FIGURE_NAMES",
    "FIGURE_TABLES",
    "LM_EVAL_HARNESS",
    "LM_EVAL_SAMPLES_SUFFIX",
    "MODEL_CARD",
    "PLAIN_TABLE_FORMATS",
    "SAMPLE_EFFICIENCY_PREFIX",
    "STATUS_FILE",
    "TABLE_FORMATS",
    "along_group",
    "along_name",
    "along_output",
    "along_path",
    "damaged",
    "dir_of",
    "dvc_metrics_dir",
    "dvc_metrics_dir_of",
    "dvc_metrics_file",
    "eval_cell_key",
    "eval_dir",
    "eval_output",
    "eval_partial",
    "export_dir",
    "figure_files",
    "figures_dir",
    "html_report",
    "is_along",
    "is_sample_efficiency",
    "kept_checkpoint",
    "lm_eval_cache",
    "lm_eval_harness_dir",
    "lm_eval_samples",
    "plot_file",
    "plots_dir",
    "report_dir",
    "report_figures",
    "report_zip",
    "sample_efficiency_dir",
    "sample_efficiency_group",
    "sample_efficiency_name",
    "sample_efficiency_path",
    "status_file",
    "table_files",
    "tables_dir",
]

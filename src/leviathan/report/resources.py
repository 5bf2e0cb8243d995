"""The resource table: what each rule's jobs really used, from Snakemake's `benchmark:` files
(wall time, peak memory, CPU time per job), so `mem_mb`/`runtime` can be sized for a cluster
from a real run. Written as CSV + Markdown with a manifest naming every benchmark file read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from leviathan.io import atomic_path
from leviathan.layout import CAPTION_FORMAT, PLAIN_TABLE_FORMATS, benchmark_rule, table_files
from leviathan.manifest import input_record, write_manifest
from leviathan.report.formatting import caption_rst

RESOURCES_TABLE = "resources"
TITLE = "Resources used per rule (Snakemake benchmark files)"
NOTE = (
    "Wall time and CPU time in seconds, peak resident memory in MB, per job (the largest of its "
    "repeats); `suggested_*`: the largest job plus 50% headroom, for `mem_mb` and `runtime` "
    "(minutes), to size a cluster profile or the config's `rule_resources`. The report rule's "
    "own job is not in it (its benchmark is written after it)."
)
COLUMNS = [
    "rule",
    "jobs",
    "wall_s_mean",
    "wall_s_max",
    "max_rss_mb_max",
    "cpu_time_s_mean",
    "cpu_time_s_max",
    "suggested_mem_mb",
    "suggested_runtime_min",
]


def read_benchmark(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One benchmark TSV (a row per repeat; Snakemake writes `-` where it could not measure)."""
    frame = pd.read_csv(path, sep="\t", na_values=["-", "NA"])
    missing = {"s", "max_rss", "cpu_time"} - set(frame.columns)
    if missing:
        raise ValueError(
            f"{path}: not a Snakemake benchmark file (no column {', '.join(sorted(missing))})"
        )
    return frame


def resource_table(paths: Sequence[str | os.PathLike[str]]) -> pd.DataFrame:
    """Per rule: jobs, wall time, peak RSS (MB), CPU time; and a suggestion with 50% headroom
    (memory rounded up to 100 MB, runtime to whole minutes)."""
    jobs = []
    for path in paths:
        frame = read_benchmark(path)
        jobs.append(
            {
                "rule": benchmark_rule(str(path)),
                "s": frame["s"].max(),
                "max_rss": frame["max_rss"].max(),
                "cpu_time": frame["cpu_time"].max(),
            }
        )
    if not jobs:
        return pd.DataFrame(columns=COLUMNS)
    per = pd.DataFrame(jobs).groupby("rule", sort=True)
    out = pd.DataFrame(
        {
            "jobs": per.size(),
            "wall_s_mean": per["s"].mean(),
            "wall_s_max": per["s"].max(),
            "max_rss_mb_max": per["max_rss"].max(),
            "cpu_time_s_mean": per["cpu_time"].mean(),
            "cpu_time_s_max": per["cpu_time"].max(),
        }
    ).reset_index()
    out["suggested_mem_mb"] = (out["max_rss_mb_max"] * 1.5 / 100).apply(_ceil) * 100
    out["suggested_runtime_min"] = (out["wall_s_max"] * 1.5 / 60).apply(_ceil)
    return out[COLUMNS]


def _ceil(x: float) -> float:
    return float(math.ceil(x)) if pd.notna(x) else math.nan


def write_resources(
    paths: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str]
) -> list[Path]:
    frame = resource_table(paths)
    files = table_files(out_dir, RESOURCES_TABLE, PLAIN_TABLE_FORMATS)
    with atomic_path(files["csv"]) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")
    texts = {
        "md": f"# {TITLE}\n\n{frame.to_markdown(index=False, floatfmt='.4g')}\n\n{NOTE}\n",
        CAPTION_FORMAT: caption_rst([f"{TITLE}.", NOTE]),
    }
    for fmt, text in texts.items():
        with atomic_path(files[fmt]) as tmp:
            tmp.write_text(text)
    for path in files.values():
        write_manifest(path, artifact_type=RESOURCES_TABLE, inputs=[input_record(p) for p in paths])
    return list(files.values())

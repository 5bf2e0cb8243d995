"""Plot data for `dvc plots show` and the resource table from Snakemake benchmark files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from leviathan import layout
from leviathan.cells import Cell
from leviathan.io import read_json, write_json
from leviathan.layout import benchmark_path, benchmark_rule
from leviathan.report.plots import write_plot_data
from leviathan.report.resources import resource_table, write_resources

CELLS = [
    Cell("micro", "gpt2", "tied", 0, "embedded"),
    Cell("micro", "gpt2", "leviathan", 0, "embedded"),
]
# the header Snakemake writes (snakemake.benchmark.BenchmarkRecord)
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _cell_files(cell: Cell, losses: list[float]) -> None:
    run = Path(layout.run_dir(cell))
    run.mkdir(parents=True)
    records = (
        [{"kind": "start", "step": 0}]
        + [
            {"kind": "val", "step": 2 * (i + 1), "tokens": 1024 * (i + 1), "val_loss": loss}
            for i, loss in enumerate(losses)
        ]
        + [{"kind": "train", "step": 1, "loss": 9.0}]
    )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    buckets = [
        {"label": "0", "n": 3, "mean_loss": 9.0},
        {"label": "1-9", "n": 0, "mean_loss": None},
        {"label": "10-99", "n": 5, "mean_loss": losses[-1]},
    ]
    write_json(
        layout.eval_output(cell, "val"), {"results": {"frequency_tokens": {"log10": buckets}}}
    )


def test_plot_data_is_long_per_cell_with_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _cell_files(CELLS[0], [5.0, 4.0])
    _cell_files(CELLS[1], [4.5, 3.5])
    curves, freq = write_plot_data(CELLS, "plots")
    frame = pd.read_csv(curves)
    assert list(frame.columns) == ["cell", "tokens", "periodic_val_loss"]  # not the eval's val_loss
    lev = frame[frame["cell"] == "micro/gpt2/leviathan/seed0"]
    assert lev["tokens"].tolist() == [1024, 2048]
    assert lev["periodic_val_loss"].tolist() == [4.5, 3.5]
    buckets = pd.read_csv(freq)
    assert buckets[buckets["cell"] == "micro/gpt2/tied/seed0"]["bucket"].astype(str).tolist() == [
        "0",
        "10-99",
    ]  # empty left out
    manifest = read_json(f"{curves}.json")
    assert {i["path"] for i in manifest["inputs"]} == {
        f"{layout.run_dir(c)}/metrics.jsonl" for c in CELLS
    }


def test_resource_table_per_rule_from_benchmark_files(tmp_path: Path) -> None:
    rows = {
        ("train", "a"): "12.5\t0:00:12\t310.2\t900\t300\t305\t1\t2\t95.0\t11.0\n",
        ("train", "b"): "20.0\t0:00:20\t402.0\t900\t300\t305\t1\t2\t98.0\t19.0\n",
        ("eval_val", ""): "3.0\t0:00:03\t-\t-\t-\t-\t-\t-\t-\t-\n",
    }
    paths = []
    for (rule, tag), row in rows.items():
        path = Path(benchmark_path(str(tmp_path / tag), rule))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + row)
        paths.append(path)
    assert benchmark_rule(str(paths[0])) == "train"
    assert (
        benchmark_rule(
            benchmark_path("results/eval/embedded/micro/gpt2", "sample_efficiency", "seed0")
        )
        == "sample_efficiency"
    )
    table = resource_table(paths).set_index("rule")
    assert table.loc["train", "jobs"] == 2
    assert table.loc["train", "wall_s_max"] == 20.0
    assert table.loc["train", "max_rss_mb_max"] == 402.0
    assert table.loc["train", "cpu_time_s_mean"] == 15.0
    assert table.loc["train", "suggested_mem_mb"] == 700
    assert table.loc["train", "suggested_runtime_min"] == 1
    assert math.isnan(table.loc["eval_val", "max_rss_mb_max"])  # not measured: no number made up
    csv, md, caption = write_resources(paths, tmp_path / "tables")
    assert "| train" in md.read_text()
    assert "suggested\\_\\*" in caption.read_text()  # the Markdown's note, escaped for the report
    assert len(read_json(f"{csv}.json")["inputs"]) == 3
    with pytest.raises(ValueError, match="not a benchmark file"):
        benchmark_rule("results/x.tsv")

"""The throughput table against hand computations from the runs' metrics logs, and the roofline's
own prediction for the device each run ran on."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from report_cells import RESULTS, write_cell

from leviathan import layout
from leviathan.cells import Cell
from leviathan.cost.memory import train_memory
from leviathan.cost.roofline import roofline
from leviathan.report.build import write_table
from leviathan.report.cellmap import DocumentCache, compute
from leviathan.report.context import ReportInputs
from leviathan.report.paper import reported_path
from leviathan.report.registry import build_tables
from leviathan.report.throughput import NO_PREDICTION, measured_rows, on_plan_device
from leviathan.train.config import train_config

H100 = "NVIDIA H100 80GB HBM3"
# per (variant, seed): (device, [[(tokens/s, step s, MFU, peak bytes, compile s) per train record] per process])
TIED0 = [(1e5, 9.0, 0.1, 7e9, 40.0), (2e5, 1.0, 0.30, 8e9, 41.0), (3e5, 0.8, 0.31, 8e9, 41.0)]
TIED0_RESUMED = [(1e5, 5.0, 0.1, 6e9, 30.0), (2.5e5, 0.9, 0.33, 9e9, 31.0)]
LEV0 = [(1e5, 9.0, 0.1, 7e9, 50.0), (1.5e5, 1.2, 0.25, 9e9, 52.0), (1.6e5, 1.1, 0.26, 9e9, 52.0)]
CPU = [(1e3, 2.0, "unknown", None, 0.0), (2e3, 1.0, "unknown", None, 0.0)]
PACE = {
    ("tied", 0): (H100, [TIED0, TIED0_RESUMED]),
    ("leviathan", 0): (H100, [LEV0]),
    ("tied", 1): ("cpu", [CPU]),
}


def _write_log(cell: Cell, device: str, processes: list[list[tuple[Any, ...]]]) -> None:
    records: list[dict[str, Any]] = []
    step = 0
    for proc in processes:
        records.append(
            {"kind": "start", "step": step, "device": device, "world_size": 1, "compile": True}
        )
        for tok_s, step_s, mfu, peak, compile_s in proc:
            step += 1
            records.append(
                {
                    "kind": "train",
                    "step": step,
                    "tokens_per_s": tok_s,
                    "step_s": step_s,
                    "mfu": mfu,
                    "peak_memory": peak,
                    "compile_s": compile_s,
                }
            )
    Path(layout.metrics_file(layout.run_dir(cell))).write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReportInputs:
    monkeypatch.chdir(tmp_path)
    for (variant, seed), (device, processes) in PACE.items():
        cell = Cell("micro", "gpt2", variant, seed, RESULTS)
        write_cell(cell, tokens=30_720)
        _write_log(cell, device, processes)
    write_cell(Cell("micro", "gpt2", "leviathan", 1, RESULTS), tokens=30_720)  # its own log
    study = {
        "scales": ["micro"],
        "vocabs": ["gpt2"],
        "variants": ["tied", "leviathan"],
        "seeds": [0, 1],
    }
    return ReportInputs(
        {"main": study}, RESULTS, ["val"], str(reported_path()), plan_devices={"micro": "H100 x1"}
    )


def test_throughput_rows_are_the_logs_beside_the_roofline_for_their_device(
    runs: ReportInputs,
) -> None:
    docs = DocumentCache()
    table = build_tables(runs, docs)["throughput"]
    frame = table.frame(docs).set_index("row")
    tied, lev, cpu, lev1 = (
        frame.loc[f"micro/gpt2/{v}/seed{s}"] for v, s in [*PACE, ("leviathan", 1)]
    )
    # the pace: each process's first record (compile, warm-up) left out, the median of the rest
    assert tied["step_s"] == statistics.median([1.0, 0.8, 0.9])
    assert tied["tokens_per_s"] == statistics.median([2e5, 3e5, 2.5e5])
    assert tied["mfu"] == statistics.median([0.30, 0.31, 0.33])
    assert tied["peak_memory"] == 9e9  # the most of any record
    assert tied["compile_s"] == 41.0 + 31.0  # each process's compile seconds, summed
    # the prediction: the roofline of the recorded shapes on the run's GPU, compiled as it ran
    tc = train_config("micro", "gpt2", "tied", seed=0)
    step = roofline(tc.model_config(), tc.micro_batch, tc.global_batch, fused=True)
    step_s = step.seconds("H100") * (tc.global_batch // tc.micro_batch)
    assert tied["predicted_step_s"] == pytest.approx(step_s)
    assert tied["predicted_mfu"] == pytest.approx(step.mfu("H100"))
    assert tied["predicted_tokens_per_s"] == pytest.approx(tc.tokens_per_step / step_s)
    job = train_memory(tc.model_config(), tc.micro_batch, 1, "h100")
    assert tied["predicted_peak_memory"] == job.traced + job.logsumexp + job.ddp_buckets
    assert tied["step_s_ratio"] == pytest.approx(0.9 / step_s)
    assert tied["prediction"] == "roofline, H100, compiled"
    # LEV's cost: its step time over tied's on the same device, measured and predicted
    assert lev["step_s_vs_tied"] == pytest.approx(1.15 / 0.9)
    assert lev["predicted_step_s_vs_tied"] == pytest.approx(
        lev["predicted_step_s"] / tied["predicted_step_s"]
    )
    # tied seed 1 ran on the CPU: its own records, nothing predicted, no ratio across devices
    assert cpu["step_s"] == 1.0 and cpu["tokens_per_s"] == 2e3
    assert math.isnan(cpu["mfu"]) and math.isnan(cpu["peak_memory"])
    assert cpu["prediction"] == f"{NO_PREDICTION} (this run: cpu)"
    assert math.isnan(cpu["predicted_step_s"]) and math.isnan(lev1["step_s_vs_tied"])
    assert math.isnan(lev["step_s_vs_untied"])  # no untied cell
    # every value is declared: recomputed from its files, it is the table's
    for (row, col), spec in table.specs.items():
        assert compute(spec, DocumentCache()) == pytest.approx(frame.loc[row, col], nan_ok=True)


def test_measured_on_the_plans_device_is_counted(runs: ReportInputs, tmp_path: Path) -> None:
    docs = DocumentCache()
    table = build_tables(runs, docs)["throughput"]
    csv = write_table(table, docs, tmp_path / "tables")["csv"]
    # seed 0 on H100 x1 (the plan's), tied seed 1 on the CPU, leviathan seed 1's log without pace
    assert measured_rows(csv) == [True, False, True, False]
    assert on_plan_device("cpu", 1, "cpu") and not on_plan_device("cpu", 1, "H100 x1")
    assert not on_plan_device(H100, 1, "H100 x8")

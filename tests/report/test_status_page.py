"""The study's status page (leviathan.report.status_page): what the run shows and what not,
counted from the cells' final checkpoints and the report's tables, as the HTML report's first
page shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from docutils.core import publish_parts
from report_cells import write_cell

from leviathan import layout
from leviathan.cells import Cell
from leviathan.model import kernel_use
from leviathan.report.build import write_report

TOKENS = 30_720
CELLS = [Cell("micro", "gpt2", v, 0, "embedded") for v in ("tied", "leviathan")]
STUDY = {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied", "leviathan"], "seeds": [0]}


def _config(below_tokens: int) -> dict[str, Any]:
    return {
        "studies": {"main": STUDY},
        "evaluate": {"val": {}},
        "corpus": {"name": "embedded"},
        "report": {"smoke_test": {"below_tokens": below_tokens, "reason": "a stated reason"}},
    }


def _train_on(cell: Cell, device: str, kernels: dict[str, str] | None = None) -> None:
    """The cell's final state as trained on `device`, with the kernel self-check `kernels`
    (None: no check recorded, as before the check existed)."""
    marker = Path(layout.final_marker(cell))
    state = json.loads(marker.read_text())
    env: dict[str, Any] = {"device": device}
    if kernels is not None:
        statuses = dict.fromkeys(kernel_use.KERNELS, kernel_use.NOT_USED)
        env["kernel_check"] = {"device": device, "seconds": 1.5, "kernels": statuses | kernels}
    marker.write_text(json.dumps({**state, "env": env}))


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for cell in CELLS:
        write_cell(cell, tokens=TOKENS)
        _train_on(cell, "cpu")
    return tmp_path


def _status(study: Path, below_tokens: int) -> tuple[str, pd.DataFrame]:
    written = write_report(_config(below_tokens), "report/tables", None, metrics_dir="metrics")
    status = Path("report") / layout.STATUS_FILE  # beside the tables
    assert status in written
    return status.read_text(), pd.read_csv(study / "report/tables/paper_vs_ours.csv")


def test_a_smoke_run_on_cpus_says_that_no_paper_number_is_reproduced(study: Path) -> None:
    text, paper = _status(study, below_tokens=TOKENS + 1)
    assert "2 cells of study ``embedded`` (scales: micro; 30,720 tokens each)" in text
    assert "2 of 2 cells are smoke tests, trained on fewer than 30,721 tokens" in text
    assert "a stated reason" in text
    # micro is not a scale the paper reports: none of its reported numbers has ours beside it
    assert paper["ours"].isna().all()
    assert f"none of the paper's {len(paper)} reported figures has ours at the same scale" in text
    assert "no number of the paper is reproduced by this run" in text
    assert "no cell trained on a GPU (by device: cpu (2))" in text


def test_the_status_follows_what_the_cells_did(study: Path) -> None:
    _train_on(CELLS[1], "cuda:0")
    text, _ = _status(study, below_tokens=TOKENS)  # 30,720 tokens: a full run at this size
    assert "all 2 cells are full runs (at least 30,720 tokens)" in text
    assert "1 of 2 cells trained on a GPU; by device: cpu (1), cuda:0 (1)" in text
    assert "cells are smoke tests" not in text


def test_the_status_names_the_kernels_that_ran_and_any_that_failed(study: Path) -> None:
    text, _ = _status(study, below_tokens=TOKENS)
    assert "none of the 2 cells records a kernel self-check (trained before it existed)" in text
    native = {kernel_use.LEV_NATIVE_FORWARD: "ok", kernel_use.LEV_NATIVE_BACKWARD: "ok"}
    _train_on(CELLS[0], "cpu", native)
    text, _ = _status(study, below_tokens=TOKENS)
    assert (
        "fused kernels that passed their self-check and ran: lev_native_forward (1 of 2 cells), "
        "lev_native_backward (1 of 2 cells); none failed; 1 of 2 cells record no check" in text
    )
    failed = "failed: M differs from the plain path: `x` off"
    triton = {k: "ok" for k in kernel_use.KERNELS[:4]} | {kernel_use.LEV_TRITON_FORWARD: failed}
    _train_on(CELLS[1], "cuda:0", triton)
    text, _ = _status(study, below_tokens=TOKENS)
    assert "ran: lev_triton_backward (1 of 2 cells), loss_triton_forward (1 of 2 cells)" in text
    assert (
        "lev_triton_forward failed its self-check in 1 of 2 cells, which ran the plain torch "
        "path instead (first: ``failed: M differs from the plain path: 'x' off``)" in text
    )


def test_the_status_is_valid_restructuredtext(study: Path) -> None:
    """docutils, which renders the HTML report's first page, reads it without a warning."""
    text, _ = _status(study, below_tokens=TOKENS + 1)
    html = publish_parts(text, writer="html", settings_overrides={"halt_level": 2})
    assert "<strong>Evidence</strong>" in html["html_body"]
    assert html["html_body"].count("<li>") == 8


def test_the_benchmarks_and_throughput_sentences_say_what_ran(study: Path) -> None:
    """No benchmark scored: the status does not claim the scores are on the benchmarks' data;
    the throughput line counts the cells measured on the plan's device (here: the CPU)."""
    text, _ = _status(study, below_tokens=TOKENS)
    assert "benchmarks' own data" not in text
    assert "no benchmark (WikiText-103, LAMBADA, the lm-eval tasks) was scored" in text
    assert "0 of 2 cells had their throughput measured on the device the plan" in text
    for cell in CELLS:  # a pace in the CPU runs' logs: measured where the plan assumed (cpu)
        log = Path(layout.metrics_file(layout.run_dir(cell)))
        train = {"kind": "train", "step": 9, "tokens_per_s": 10.0, "step_s": 2.0, "mfu": "unknown"}
        start = {"kind": "start", "step": 8, "device": "cpu", "world_size": 1}
        log.write_text(log.read_text() + json.dumps(start) + "\n" + json.dumps(train) + "\n")
    text, _ = _status(study, below_tokens=TOKENS)
    assert "all 2 cells had their throughput measured on the device the plan assumes" in text

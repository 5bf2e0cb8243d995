"""The study's status (leviathan.report.status): what the run shows and what not, counted from the
cells' final checkpoints and the report's tables, as the HTML report's first page shows it."""

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


def _train_on(cell: Cell, device: str) -> None:
    marker = Path(layout.final_marker(cell))
    state = json.loads(marker.read_text())
    marker.write_text(json.dumps({**state, "env": {"device": device}}))


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


def test_the_status_is_valid_restructuredtext(study: Path) -> None:
    """docutils, which renders the HTML report's first page, reads it without a warning."""
    text, _ = _status(study, below_tokens=TOKENS + 1)
    html = publish_parts(text, writer="html", settings_overrides={"halt_level": 2})
    assert "<strong>Evidence</strong>" in html["html_body"]
    assert html["html_body"].count("<li>") == 6

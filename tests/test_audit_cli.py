"""`leviathan audit` on what a user names: a missing file says so; DVC's metrics.json (a
rendering of the metrics table) is traced number by number like any table; the summary says
what was checked, never "0 numbers" as a pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from leviathan.cli import main
from leviathan.eval.results import write_result
from leviathan.manifest import input_record, write_manifest
from leviathan.report.build import write_table
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec
from leviathan.report.table import Table


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """shard -> evaluation JSON -> the metrics table (CSV, Markdown, LaTeX, JSON), each link
    recording its input's sha256; returns the tables' directory."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    Path("data/shard.bin").write_bytes(bytes(range(64)))
    write_manifest("data/shard.bin", artifact_type="tokens")
    write_result(  # with its manifest, as an evaluation writes it
        "val.json",
        {
            "kind": "val",
            "checkpoint": None,
            "code": {"git_commit": None},
            "inputs": [{"role": "val_tokens", **input_record("data/shard.bin")}],
            "results": {"overall": {"loss": 2.5, "targets": 4, "total_nats": 10.0}},
        },
    )
    table = Table(
        "metrics",
        "Metrics",
        ["cell", "train_tokens", "evidence"],
        {"val_loss": "loss", "val_ppl": "ppl"},
    )
    row = table.add_row(
        "micro/gpt2/leviathan/seed0",
        cell="micro/gpt2/leviathan/seed0",
        train_tokens="30,720",
        evidence="smoke test",
    )
    source = (Source("val.json", "/results/overall/loss"),)
    table.set(row, "val_loss", ValueSpec("mean", source))
    table.set(row, "val_ppl", ValueSpec("exp", source))
    paths = write_table(table, DocumentCache(), "tables")
    assert "json" in paths  # the metrics table's DVC rendering
    return Path("tables")


def test_metrics_json_numbers_are_traced(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert json.loads((report / "metrics.json").read_text()) == {
        "micro/gpt2/leviathan/seed0": {
            "evidence": "smoke test",
            "train_tokens": 30720,
            "val_loss": 2.5,
            "val_ppl": pytest.approx(math.exp(2.5)),
        }
    }
    assert main(["audit", "tables/metrics.json"]) == 0
    out = capsys.readouterr().out
    assert "audit passed: 2 number(s) of tables/metrics.json recomputed from their sources" in out
    assert "metrics.csv [micro/gpt2/leviathan/seed0, val_ppl]  = 12.1825 (exp of 1" in out
    assert "ok   tables/metrics.json  sha256" in out  # the rendering itself is checked too


def test_an_edited_metrics_json_fails(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = report / "metrics.json"
    path.write_text(path.read_text().replace("2.5", "2.4"))
    assert main(["audit", "tables/metrics.json"]) == 1
    assert "tables/metrics.json" in capsys.readouterr().err


def test_a_missing_file_says_no_such_file(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "tables/nope.csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("leviathan audit: error: tables/nope.csv: no such file")
    assert len(err.splitlines()) == 1


def test_an_artifact_audit_says_it_traced_no_numbers(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "data/shard.bin"]) == 0
    out = capsys.readouterr().out
    assert "audit passed: data/shard.bin (an artifact, not a table: no numbers to trace)" in out
    assert "0 number" not in out


@pytest.mark.parametrize(
    ("table", "content", "message"),
    [
        ("metrics.csv", "[]\n", "holds a JSON list, not an object"),
        ("metrics.md", "[]\n", "holds a JSON list, not an object"),
        ("metrics.csv", '{"kind": "tab', "not valid JSON"),
    ],
)
def test_a_damaged_table_manifest_is_one_line_naming_it(
    report: Path, capsys: pytest.CaptureFixture[str], table: str, content: str, message: str
) -> None:
    manifest = report / f"{table}.json"
    manifest.write_text(content)
    assert main(["audit", str(report / table)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"leviathan audit: error: {manifest.resolve()}: {message}")

"""bench/rehearse.py: its verdicts, and the whole rehearsal at a small size (`make rehearse`'s
code runs in the test suite, so it cannot rot)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "rehearse.py"


def _module():
    spec = importlib.util.spec_from_file_location("rehearse", SCRIPT)
    assert spec
    assert spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sizes_and_verdicts() -> None:
    r = _module()
    assert r.parse_size("2G") == 2_000_000_000
    assert r.parse_size("50M") == 50_000_000
    assert r.parse_size("1.5g") == 1_500_000_000
    assert r.parse_size("1000") == 1000
    table = r.Table()
    table.add("fits", "m", 10.0, 60.0, 100.0, 4000.0)
    assert not table.over
    table.add("slow", "m", 61.0, 60.0)
    table.add("big", "m", 1.0, 60.0, 5000.0, 4000.0)
    table.add("no limit", "m", 1e9, None)
    assert [row["verdict"] for row in table.rows] == ["ok", "OVER", "OVER", "ok"]
    assert table.over
    assert "| slow | m | 61.0 s | 60.0 s | OVER |" in table.render()


@pytest.mark.slow
def test_rehearsal_runs_every_step_at_a_small_size(tmp_path: Path) -> None:
    out = tmp_path / "rehearse.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--size",
            "2M",
            "--work",
            str(tmp_path / "w"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(out.read_text())
    rows = result["table"]
    steps = " ".join(row["step"] for row in rows)
    for vocab in ("gpt2", "cl100k_base", "o200k_base"):
        assert f"tokenize {vocab}" in steps
        assert f"word counts {vocab}" in steps
    for what in ("fetch", "loader", "run start", "train 1.2b", "checkpoint save", "eval val 200m"):
        assert what in steps, what
    memory = [row for row in rows if row["step"].startswith("GPU memory per GPU")]
    assert memory  # one row per GPU scale: a memory figure, no time
    timed = [row for row in rows if row not in memory]
    assert all(row["predicted_s"] and row["predicted_s"] > 0 for row in timed)
    over = any(row["verdict"] == "OVER" for row in rows)
    assert done.returncode == (1 if over else 0)
    assert "| step | measured | predicted at the study |" in done.stdout
    assert "disk at most " in done.stdout  # the study's disk, from the plan's counters
    measured = result["measured"]
    assert measured["corpus"]["text_bytes"] >= 2_000_000
    assert measured["train"]["rss_mb"] > 0
    assert measured["checkpoint"]["bytes"] > 1e9

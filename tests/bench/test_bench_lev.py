"""bench/bench_lev.py at a small vocabulary: the LEV benchmark's own code runs, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_lev.py"


def test_bench_lev_runs_and_reports_every_ratio(tmp_path: Path) -> None:
    out = tmp_path / "lev.json"
    args = ["--vocab-size", "600", "--d-model", "64", "--ids", "128", "--repeats", "1"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--pass-ids", "64", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    assert (r["V"], r["D"], r["ids"]) == (600, 64, 128)
    for what in ("materialize", "train"):
        for key in ("floor_matmul_s", "floor_pass_s", "plain_s", "auto_s"):
            assert r[what][key] > 0, (what, key)
        assert r[what]["floor_s"] == r[what]["floor_matmul_s"] + r[what]["floor_pass_s"]
        assert r[what]["speedup"] == r[what]["plain_s"] / r[what]["auto_s"]
    assert 0 < r["materialize"]["steps_1_3_s"]
    assert "materialize floor" in done.stdout
    assert "train       floor" in done.stdout

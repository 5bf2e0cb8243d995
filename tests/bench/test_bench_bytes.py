"""bench/bench_bytes.py at the micro scale: the byte count's own code runs, so it cannot rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_bytes_counts_both_losses_and_the_backbone_both_ways() -> None:
    args = ["--scale", "micro", "--vocab", "gpt2", "--micro-batch", "2"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_bytes.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    per_logit = dict(re.findall(r"^  (chunked loss|GPU path)\s+([\d.]+)$", done.stdout, re.M))
    assert float(per_logit["GPU path"]) < float(per_logit["chunked loss"])
    totals = re.findall(r"^  total\s+([\d.]+)$", done.stdout, re.M)
    assert len(totals) == 2 and float(totals[1]) < float(totals[0])  # fused norms move less

"""The training tests' shared run: `reference_run`, one uninterrupted run that the trainer's and
the signals' tests hold their interrupted and resumed runs against (one run for the session,
not one per module)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_trainer import cli


@pytest.fixture(scope="session")
def reference_run(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The micro scale's 12 steps through `leviathan train`, a checkpoint every 4 steps, with
    the live view on (DVCLive: test_trainer's test_dvclive_... checks it). Read only: a test
    that changes it copies it first."""
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    subprocess.run(
        cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4", "--runtime", "dvclive=true"),
        check=True,
    )
    return run_dir

"""`leviathan preflight` against the local single-node cluster (ci/local_slurm.sh, started by
this package's fixture): the real sacctmgr, sinfo and srun answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
LEVIATHAN = str(Path(sys.executable).with_name("leviathan"))


def preflight(cluster: Any, tmp_path: Path, account: str) -> subprocess.CompletedProcess[str]:
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"] |= {
        "slurm_account": account,
        "slurm_partition": cluster.partition,
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(profile))
    return subprocess.run(
        [LEVIATHAN, "preflight", "--profile", str(tmp_path)],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_preflight_asks_the_cluster(slurm_cluster: Any, tmp_path: Path) -> None:
    """The cluster's account and partition pass, the srun probe reports from a compute node
    (the fake GPUs give torch no CUDA device, so the torch line fails and names why), and an
    account the cluster does not know fails naming the ones it does."""
    run = preflight(slurm_cluster, tmp_path, slurm_cluster.account)
    out = run.stdout
    assert f"ok   account {slurm_cluster.account}: known to `sacctmgr`" in out, out + run.stderr
    assert f"ok   partition {slurm_cluster.partition}: known to `sinfo`" in out, out
    assert "hub on a compute node:" in out and "torch: torch " in out, out
    wrong = preflight(slurm_cluster, tmp_path, "no-such-account")
    assert wrong.returncode == 1
    assert "FAIL account no-such-account: unknown to `sacctmgr` (it lists" in wrong.stdout
    assert slurm_cluster.account in wrong.stdout

"""DVC's cache links, not copies (.dvc/config `cache.type`, docs/dvc.md): a checkpoint that a
stage writes and `dvc repro` commits is on disk once, shared by the workspace and the cache, and
a rerun that rewrites the metrics log leaves the committed copy in the cache intact."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import BIN, ROOT

pytestmark = pytest.mark.slow

DVC = str(BIN / "dvc")
WRITE = """
import sys
from pathlib import Path
import torch
from leviathan.checkpoint.store import save_checkpoint
torch.manual_seed(0)
weights = {"w": torch.randn(1024, 1024)}  # 4 MiB
save_checkpoint(Path("results/runs/cell/checkpoints"), "final", model_state=weights,
                optim_state={"state": {}, "param_groups": []}, state={"step": 1})
Path("results/runs/cell/metrics.jsonl").write_text('{"kind": "start", "step": 0}\\n')
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)}: {out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def shares_extents(a: Path, b: Path) -> bool:
    """Whether two files of a copy-on-write file system share their data (a reflink)."""

    def physical(p: Path) -> list[str]:
        out = subprocess.run(["filefrag", "-v", str(p)], capture_output=True, text=True)
        return [line.split()[3] for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]

    return bool(shutil.which("filefrag")) and physical(a) == physical(b) != []


def test_a_committed_checkpoint_is_not_duplicated_on_disk(tmp_path: Path) -> None:
    repo, home = tmp_path / "repo", tmp_path / "dvc-home"
    (repo / ".dvc").mkdir(parents=True)
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the project's own
    (repo / "write.py").write_text(WRITE)
    (repo / "dvc.yaml").write_text(
        f"stages:\n  train:\n    cmd: {sys.executable} write.py\n    deps: [write.py]\n"
        "    outs:\n      - results/runs:\n          persist: true\n"
    )
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "DVC_GLOBAL_CONFIG_DIR": str(home / "global"),
        "DVC_SYSTEM_CONFIG_DIR": str(home / "system"),
        "DVC_SITE_CACHE_DIR": str(home / "site"),
    }
    run(["git", "init", "-q"], repo, env)
    run([DVC, "repro"], repo, env)

    weights = repo / "results/runs/cell/checkpoints/final/model.safetensors"
    size = weights.stat().st_size
    assert size > 4 * 2**20
    cached = [p for p in (repo / ".dvc" / "cache").rglob("*") if p.is_file()]
    twin = [p for p in cached if p.stat().st_size == size]
    assert len(twin) == 1, "the weights are not in DVC's cache"
    same_inode = twin[0].stat().st_ino == weights.stat().st_ino
    assert same_inode or shares_extents(weights, twin[0]), (
        "DVC copied the checkpoint into its cache: .dvc/config cache.type must link"
    )
    # the workspace and the cache together hold the weights once (du counts a hard link once)
    du = subprocess.run(["du", "-sk", str(repo)], capture_output=True, text=True, check=True)
    if same_inode:
        assert int(du.stdout.split()[0]) * 1024 < 1.5 * size

    # a rerun of the cell rewrites its metrics log: a new file, the cached one is untouched
    from leviathan.train.metrics_log import rewind_metrics

    metrics = repo / "results/runs/cell/metrics.jsonl"
    before = metrics.read_bytes()
    linked = [p for p in cached if p.read_bytes() == before]
    assert linked
    rewind_metrics(metrics, 5, tmp_path / "aside.jsonl")
    with open(metrics, "a") as fh:
        fh.write('{"kind": "train", "step": 6}\n')
    assert all(p.read_bytes() == before for p in linked)
    run([DVC, "status"], repo, env)  # the cache still verifies

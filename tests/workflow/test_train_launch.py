"""How a training job is launched on SLURM: one node or several (srun + one torchrun per node,
c10d rendezvous on the first node), and the early SIGTERM sized from the checkpoint."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from leviathan import layout
from leviathan.cells import Cell
from leviathan.study.cluster import GRACE_MARGIN_S, preempt_grace_s, resources, train_slurm_value
from leviathan.study.launch import launch_argv, launch_env, launcher_args
from leviathan.train.config import train_config
from leviathan.train.trainer import build_cell_model

ROOT = Path(__file__).resolve().parents[2]
TWO_NODES = {"1.2b": {"gpus": 8, "gpu_model": "h100", "nodes": 2, "cpus_per_gpu": 8}}


def test_a_multi_node_job_asks_slurm_for_its_nodes_and_runs_one_torchrun_per_node() -> None:
    config = {"resources": TWO_NODES}
    job = resources(config, "1.2b")
    # per node: 8 GPUs, 64 CPUs (one task each); the plugin's own --gpus (a job total) unset
    assert job["gpu"] == 0
    assert job["threads"] == 64
    extra = job["slurm_extra"].split()
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gpus-per-node=h100:8"} <= set(
        extra
    )
    words = launch_argv(
        launcher_args(config, "1.2b"), python="/env/python", rdzv_host="gpu-001", rdzv_id="4242"
    )
    srun, torchrun = words[: words.index("/env/python")], words[words.index("/env/python") :]
    assert srun[0] == "srun"
    assert "--overlap" in srun
    assert "--ntasks-per-node=1" in srun
    assert "--nodes=2" in srun
    assert "--gpus-per-node=8" in srun
    assert "--cpus-per-task=64" in srun
    assert torchrun[:3] == ["/env/python", "-m", "leviathan.torchrun"]  # torchrun, 128+signal
    assert {"--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d"} <= set(torchrun)
    assert "--rdzv-endpoint=gpu-001:29500" in torchrun
    assert "--rdzv-id=4242" in torchrun
    # torchrun waits the grace for its workers' preemption save (its own default: 30 s)
    assert launch_env(config, "1.2b") == {
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(preempt_grace_s(config, "1.2b"))
    }


def test_one_node_launchers_are_unchanged() -> None:
    """Cells trained before multi-node jobs existed keep their params (no rerun)."""
    assert launcher_args({"resources": {"400m": {"gpus": 4}}}, "400m") == (
        "-m torch.distributed.run --standalone --nproc-per-node 4"
    )
    assert launcher_args({}, "micro") == ""
    assert launch_argv("", python="py", rdzv_host="h", rdzv_id="1") == ["py"]
    assert launch_env({}, "micro") == {}


def test_dry_run_shows_the_multi_node_command(tmp_path: Path) -> None:
    """`leviathan config show --cell` prints the command the train rule would run."""
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    paper["resources"]["1.2b"]["nodes"] = 2
    cfg = tmp_path / "two_nodes.yaml"
    cfg.write_text(yaml.safe_dump(paper))
    cell = "1.2b/o200k_base/leviathan/seed0"
    out = subprocess.run(
        [sys.executable, "-m", "leviathan.cli", "config", "show", "--configfile", str(cfg)]
        + ["--cell", cell, "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    shown = json.loads(out.stdout)
    command = shown["command"]
    assert command[0] == "srun"
    assert "--rdzv-endpoint=<first node>:29500" in command
    assert command[command.index("-m", command.index("--rdzv-id=<job id>")) + 1] == "leviathan.cli"
    key = layout.config_results_key(paper)
    assert layout.run_dir(Cell("1.2b", "o200k_base", "leviathan", 0, key)) in command
    assert "--signal=TERM@" in shown["resources"]["slurm_extra"]
    assert shown["command_env"]["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"].isdigit()


def test_the_grace_is_sized_from_the_checkpoint() -> None:
    """Two checkpoints at the write rate plus the margin; the checkpoint's bytes re-derived from
    the parameters of the real model (fp32 weights + AdamW's two moments)."""
    config = {"resources": {"micro": {"gpus": 1, "checkpoint_write_mb_s": 0.5}}}
    grace = preempt_grace_s(config, "micro")
    # no study names a micro cell: the largest one the scale can have (o200k_base, untied)
    model = build_cell_model(train_config("micro", "o200k_base", "untied", total_tokens=512))
    size = 3 * 4 * sum(p.numel() for p in model.parameters())
    assert grace == math.ceil(2 * size / 0.5e6) + GRACE_MARGIN_S
    assert f"--signal=TERM@{grace}" in resources(config, "micro")["slurm_extra"]
    config["resources"]["micro"]["signal_grace_s"] = grace - 1
    with pytest.raises(ValueError, match=r"resources.micro.signal_grace_s=.* raise it"):
        resources(config, "micro")
    assert "slurm_extra" not in resources({"resources": {"micro": {"cpus": 2}}}, "micro")


def test_the_profiles_slurm_extra_comes_before_the_workflows_flags() -> None:
    config = {"resources": {"400m": {"gpus": 4}}}
    merged = train_slurm_value(config, "400m", "slurm_extra", "--exclusive")
    assert merged.startswith("--exclusive --signal=TERM@")
    own = {"resources": {"400m": {"gpus": 4, "slurm_extra": "--mail-type=END"}}}
    assert train_slurm_value(own, "400m", "slurm_extra", "--exclusive").startswith("--mail-type")
    assert train_slurm_value(config, "400m", "qos", "normal") == "normal"

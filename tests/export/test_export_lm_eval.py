"""lm-eval's own `hf` backend on an export agrees with our `leviathan` backend on the run.

Both run through lm-eval's own CLI on the pipeline's local stand-ins of the six paper tasks
(workflow/resources/smoke/lm_eval/, the official schemas): per-request log-likelihoods within
1e-4 and the same accuracies.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leviathan.cli import main
from leviathan.eval.config import PAPER_TASKS, eval_config
from leviathan.eval.lm_eval_tasks import write_local_tasks
from leviathan.layout import repo_root
from leviathan.study.config import resolve

# our backend: lm-eval's own command line with the `leviathan` model registered
OURS = str(Path(sys.executable).with_name("leviathan-lm-eval"))


def local_task_yamls(out: Path) -> list[str]:
    """lm-eval task YAMLs of the default config's local stand-ins (`leviathan eval lm-eval-tasks`):
    each official YAML included, only the data on local files."""
    cfg = eval_config(resolve(root=repo_root())).lm_eval
    paths = write_local_tasks(cfg, out)
    assert sorted(p.stem for p in paths) == sorted(PAPER_TASKS)
    return [p.stem for p in paths]


def run_cli(
    prefix: list[str], model: str, model_args: str, tasks: list[str], include: Path, out: Path
) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    cmd = [
        *prefix,
        "run",
        "--model",
        model,
        "--model_args",
        model_args,
        "--tasks",
        ",".join(tasks),
        "--include_path",
        str(include),
        "--device",
        "cpu",
        "--batch_size",
        "4",
        "--log_samples",
        "--output_path",
        str(out),
        "--seed",
        "0",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def collect(out: Path) -> tuple[dict[str, dict], dict[tuple[str, int, int], float]]:
    """(results per task, log-likelihood per (task, doc, request)) of one lm-eval run."""
    (results_file,) = out.rglob("results_*.json")
    results = json.loads(results_file.read_text())["results"]
    lls = {}
    for samples in out.rglob("samples_*.jsonl"):
        task = re.fullmatch(r"samples_(.+)_\d{4}-.*\.jsonl", samples.name).group(1)  # type: ignore[union-attr]
        for line in samples.read_text().splitlines():
            row = json.loads(line)
            for i, resp in enumerate(row["resps"]):
                lls[task, row["doc_id"], i] = float(resp[0][0])
    return results, lls


@pytest.mark.slow
def test_hf_backend_on_the_export_agrees_with_ours(
    micro_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo_root())  # the config's data files are relative to the workflow
    export = tmp_path / "export"
    assert main(["export", str(micro_run), str(export)]) == 0
    include = tmp_path / "tasks"
    include.mkdir()
    tasks = local_task_yamls(include)
    run_cli(
        [sys.executable, "-m", "lm_eval"],
        "hf",
        f"pretrained={export},dtype=float32",
        tasks,
        include,
        tmp_path / "hf",
    )
    run_cli(
        [OURS],
        "leviathan",
        f"pretrained={micro_run},precision=fp32",
        tasks,
        include,
        tmp_path / "ours",
    )
    hf_results, hf_lls = collect(tmp_path / "hf")
    our_results, our_lls = collect(tmp_path / "ours")
    assert set(hf_results) == set(our_results) == set(tasks)
    assert hf_lls.keys() == our_lls.keys()
    assert len(hf_lls) >= 6 * 4
    worst = max(abs(hf_lls[k] - our_lls[k]) for k in hf_lls)
    assert worst <= 1e-4, worst
    for task in tasks:
        for metric in ("acc,none", "acc_norm,none"):
            if metric in our_results[task]:
                assert hf_results[task][metric] == our_results[task][metric], (task, metric)

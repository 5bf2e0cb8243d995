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
import yaml

from leviathan.cli import main
from leviathan.eval.config import PAPER_TASKS, LocalTaskData
from leviathan.eval.lm_eval_tasks import SPLIT_KEYS, official_config, task_manager, with_local_data
from leviathan.paper import repo_root

SMOKE = repo_root() / "workflow" / "resources" / "smoke" / "lm_eval"
SMOKE_FILES = {
    "hellaswag": {"validation": "hellaswag_validation.jsonl"},
    "arc_easy": {"test": "arc_easy_test.jsonl"},
    "arc_challenge": {"test": "arc_challenge_test.jsonl"},
    "piqa": {"validation": "piqa_validation.jsonl"},
    "winogrande": {"validation": "winogrande_validation.jsonl"},
    "lambada_openai": {"test": "lambada_test.jsonl"},
}
# our backend, registered with lm-eval, then lm-eval's own command line
OURS = "import sys, leviathan.eval.lm_eval_adapter; from lm_eval.__main__ import cli_evaluate; sys.argv[0] = 'lm-eval'; cli_evaluate()"


def local_task_yamls(out: Path) -> list[str]:
    """lm-eval task YAMLs `<task>_local`: the official YAML included, only the data on local files
    (the same change `leviathan eval lm-eval` makes for local data)."""
    tm = task_manager(PAPER_TASKS)
    names = []
    for task in PAPER_TASKS:
        official = official_config(tm, task)
        files = {split: str(SMOKE / name) for split, name in SMOKE_FILES[task].items()}
        local, _ = with_local_data(official, LocalTaskData(data_files=files))
        keys = ("dataset_path", "dataset_name", "dataset_kwargs", *SPLIT_KEYS)
        doc = {"include": official["metadata"]["official_config"], "task": f"{task}_local",
               **{k: local.get(k) for k in keys}}  # fmt: skip
        (out / f"{task}_local.yaml").write_text(yaml.safe_dump(doc))
        names.append(f"{task}_local")
    return names


def run_cli(prefix: list[str], model: str, model_args: str, tasks: list[str], include: Path, out: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [*prefix, "run", "--model", model, "--model_args", model_args, "--tasks", ",".join(tasks),
           "--include_path", str(include), "--device", "cpu", "--batch_size", "4", "--log_samples",
           "--output_path", str(out), "--seed", "0"]  # fmt: skip
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
def test_hf_backend_on_the_export_agrees_with_ours(micro_run: Path, tmp_path: Path) -> None:
    export = tmp_path / "export"
    assert main(["export", str(micro_run), str(export)]) == 0
    include = tmp_path / "tasks"
    include.mkdir()
    tasks = local_task_yamls(include)
    run_cli([sys.executable, "-m", "lm_eval"], "hf", f"pretrained={export},dtype=float32", tasks, include,
            tmp_path / "hf")  # fmt: skip
    run_cli([sys.executable, "-c", OURS], "leviathan", f"checkpoint={micro_run},precision=fp32", tasks,
            include, tmp_path / "ours")  # fmt: skip
    hf_results, hf_lls = collect(tmp_path / "hf")
    our_results, our_lls = collect(tmp_path / "ours")
    assert set(hf_results) == set(our_results) == set(tasks)
    assert hf_lls.keys() == our_lls.keys() and len(hf_lls) >= 6 * 4
    worst = max(abs(hf_lls[k] - our_lls[k]) for k in hf_lls)
    assert worst <= 1e-4, worst
    for task in tasks:
        for metric in ("acc,none", "acc_norm,none"):
            if metric in our_results[task]:
                assert hf_results[task][metric] == our_results[task][metric], (task, metric)

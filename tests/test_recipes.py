"""The README's Recipes, each run as written: add a variant, train on your own text, watch a
running job, resume it, live curves (running one cell and `tiny` are dry-run with the other
documented commands in tests/test_docs.py)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_cli_errors import train_args
from torch import nn

from leviathan import layout
from leviathan.cli import main
from leviathan.model import build_model, model_config
from leviathan.model import config as config_module
from leviathan.model import variants as variants_module
from leviathan.model.variants import InputOutput, TableInput
from leviathan.provenance import ALLOW_FOREIGN_ENV

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _wide_head(c: object) -> InputOutput:
    """A toy variant, as the recipe adds one: a V x D input table and a separate head."""
    head = nn.Linear(c.d_model, c.vocab_size, bias=False)  # type: ignore[attr-defined]
    table = TableInput(c.vocab_size, c.d_model, c.init_std)  # type: ignore[attr-defined]
    return InputOutput("my_variant", table, head)


def test_add_a_variant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the recipe's two lines: the builder in VARIANTS, the name in VARIANT_NAMES
    monkeypatch.setitem(variants_module.VARIANTS, "my_variant", _wide_head)
    names = (*config_module.VARIANT_NAMES, "my_variant")
    monkeypatch.setattr(config_module, "VARIANT_NAMES", names)
    model = build_model(model_config("micro", "gpt2", "my_variant"))
    ids = torch.randint(0, 50_257, (2, 17))
    assert math.isfinite(model.loss(ids[:, :-1], ids[:, 1:]).item())
    assert main(["params", "--scale", "micro", "--vocab", "gpt2", "--variant", "my_variant"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("my_"))
    table_params = 50_257 * 64  # V x D, twice: the input table and the head
    assert f"{table_params / 1e6:,.3f}M" in row.split()[1:4]
    study = tmp_path / "study.yaml"
    study.write_text(
        "studies: {ablation: {scales: [micro], vocabs: [gpt2], variants: [tied, my_variant]}}\n"
    )
    monkeypatch.chdir(ROOT)
    assert (
        main(
            [
                "target",
                "--scale",
                "micro",
                "--vocab",
                "gpt2",
                "--variant",
                "my_variant",
                "--configfile",
                str(study),
            ]
        )
        == 0
    )


@pytest.mark.slow
def test_watch_then_resume_with_dvclive(tmp_path: Path, random_shards: tuple[Path, Path]) -> None:
    """A job stopped by SIGTERM (SLURM's time limit) writes a checkpoint and exits 143; its
    metrics.jsonl is readable while it runs; the same command resumes it to the end."""
    pytest.importorskip(
        "dvclive", reason="the DVCLive recipe needs `pip install 'leviathan[live]'`"
    )
    run_dir = tmp_path / "run"
    live = [
        "--runtime",
        "checkpoint.every=1",
        "--runtime",
        "validation.every=5",
        "--runtime",
        "dvclive=true",
    ]
    steps = ["--set", f"total_tokens={8 * 64 * 40}", "--runtime", "progress=true"]
    argv = train_args(random_shards, run_dir, *live, *steps, variant="leviathan")
    cmd = [str(BIN / "leviathan"), *argv]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = layout.metrics_file(run_dir)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and job.poll() is None:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        if sum('"kind": "train"' in line for line in lines) >= 3:
            break
        time.sleep(0.1)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]  # watched mid-run
    assert lines[0]["kind"] == "start"
    assert {"loss", "lr", "tokens_per_s"} <= set(next(r for r in lines if r["kind"] == "train"))
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=600)
    assert job.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "micro/gpt2/leviathan:" in err
    assert "/40 [" in err  # the progress bar (step of 40)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert 0 < result["start_step"] < result["steps"] == 40
    live = layout.dvclive_dir(run_dir)
    assert (live / "plots" / "metrics" / "train" / "loss.tsv").is_file()


@pytest.mark.slow
def test_train_on_your_own_text(tmp_path: Path) -> None:
    """The README's own-text study file, as written, fetched and tokenized by the workflow."""
    from test_docs import example_file

    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "my_study.yaml").write_text(example_file("my_study.yaml"))
    texts = tmp_path / "my_texts" / "notes"
    texts.mkdir(parents=True)
    for i in range(40):
        (texts / f"{i}.txt").write_text(f"Note {i}: a plain sentence of my own, number {i}.\n" * 20)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", ALLOW_FOREIGN_ENV: "1"}
    cmd = [
        str(BIN / "snakemake"),
        "all_data",
        "--profile",
        "profiles/local",
        "--configfile",
        "my_study.yaml",
    ]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    written = layout.shards(layout.tokens_dir("mytext", "gpt2"))
    manifest = json.loads((tmp_path / layout.manifest_path(written["train"])).read_text())
    assert manifest["tokens"] > 0
    assert (tmp_path / written["val"]).is_file()

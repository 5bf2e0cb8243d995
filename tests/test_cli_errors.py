"""The `leviathan` command as a new user meets it: numbers as written (`--set lr=3e-4`), user
errors in one line with no traceback (exit status 2), a closed pipe ends it quietly, and a cell
no config runs is named as such."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leviathan.cli import main

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _one_line_error(capsys: pytest.CaptureFixture[str], args: list[str], text: str) -> str:
    """`leviathan ARGS` (in this process: an uncaught exception would fail the test) exits 2
    with exactly one line on stderr, `leviathan <command>: error: ...` holding `text`."""
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"leviathan {args[0]}: error: "), err
    assert text in lines[0]
    return lines[0]


def train_args(
    shards: tuple[Path, Path], run_dir: Path, *extra: str, variant: str = "tied"
) -> list[str]:
    """`leviathan train` arguments of a 2-step micro run on `shards` (later --set/--runtime
    items in `extra` win)."""
    train, val = shards
    cell = ["--scale", "micro", "--vocab", "gpt2", "--variant", variant]
    files = ["--train", str(train), "--val", str(val), "--run-dir", str(run_dir)]
    quiet = ["--set", f"total_tokens={8 * 64 * 2}", "--runtime", "progress=false"]
    return ["train", *cell, *files, *quiet, *extra]


def test_train_reads_3e_minus_4_as_the_number(
    tmp_path: Path, random_shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert (
        main(
            train_args(
                random_shards, run_dir, "--set", "lr=3e-4", "--runtime", "validation.every=1"
            )
        )
        == 0
    )
    import json

    start = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert start["kind"] == "start"
    assert json.dumps(start).count("0.0003") >= 1  # the recorded config holds the float


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--runtime", "validation.every=often"),
            "--runtime: validation.every='often' is not an integer",
        ),
        (("--set", "lr=fast"), "--set: lr='fast' is not a number: give a number, e.g. lr=3e-4"),
        (("--set", "speed=3"), "--set: unknown key 'speed'"),
        (("--set", "micro_batch=3"), "train.micro_batch=3 does not divide the per-rank batch 8"),
        (("--set", "lr"), "--set 'lr': expected KEY=VALUE"),
        # every range, refused where it is read, naming the key and what it may be
        (("--runtime", "log_every=0"), "--runtime: log_every=0 must be >= 1"),
        (
            ("--runtime", "threads=-2"),
            "--runtime: threads=-2 must be >= 0 (torch CPU threads; 0: all",
        ),
        (("--runtime", "validation.windows=-1"), "--runtime: validation.windows=-1 must be >= 0"),
        (("--runtime", "checkpoint.every=-1"), "--runtime: checkpoint.every=-1 must be >= 0"),
        (("--runtime", "checkpoint.keep_last=0"), "--runtime: checkpoint.keep_last=0 must be >= 1"),
        (("--runtime", "ckpt_every=4"), "--runtime: unknown key 'ckpt_every': valid keys are"),
        (
            ("--runtime", "wandb=true"),
            "--runtime: wandb=True: wandb is a block of its own keys (enabled, project, entity, "
            "mode): write wandb: {KEY: VALUE} (or --runtime wandb.KEY=VALUE)",
        ),
        (
            ("--runtime", "validation=5"),
            "--runtime: validation=5: validation is a block of its own",
        ),
        (
            ("--runtime", "checkpoint.often=4"),
            "--runtime: unknown key checkpoint.often: valid keys are checkpoint.every",
        ),
        (("--runtime", "dist_timeout_s=0"), "--runtime: dist_timeout_s=0 must be >= 1 (seconds)"),
        (("--runtime", "device=bogus"), "--runtime: device='bogus' is not a device: use auto, cpu"),
        (("--runtime", "device=cuda:x"), "--runtime: device='cuda:x' is not a device"),
        (("--set", "eps=-1"), "train.eps=-1.0 must be > 0"),
        (("--set", "betas=[2,3]"), "train.betas=[2.0, 3.0] must each be in [0, 1)"),
        (("--set", "betas=[0.9,1]"), "train.betas=[0.9, 1.0] must each be in [0, 1)"),
        (("--set", "context=100000"), "train.context=100000 exceeds the model's max_seq_len 64"),
        # non-finite and absurd values, as YAML writes them too
        (("--set", "lr=.inf"), "--set: lr=inf is not a finite number: give a finite number"),
        (("--set", "lr=inf"), "--set: lr='inf' is not a number"),
        (("--set", "grad_clip=.nan"), "--set: grad_clip=nan is not a finite number"),
        (("--set", "total_tokens=1e30"), "train.total_tokens=1e+30 is more than 1e+15 tokens"),
        (("--runtime", "log_line_s=-5"), "--runtime: log_line_s=-5.0 must be >= 0 (seconds"),
        (("--runtime", "log_line_s=.inf"), "--runtime: log_line_s=inf is not a finite number"),
        (("--runtime", "log_line_every=-1"), "--runtime: log_line_every=-1 must be >= 0"),
    ],
)
def test_train_refuses_bad_values_before_anything_runs(
    tmp_path: Path,
    random_shards: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    run_dir = tmp_path / "run"
    assert main(train_args(random_shards, run_dir, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not run_dir.exists()  # nothing started, nothing written


def test_train_on_a_run_directory_that_is_a_file_is_one_line(
    tmp_path: Path, random_shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.write_text("")
    message = f"{run_dir}: {run_dir} is a file, where this run directory needs a folder"
    _one_line_error(capsys, train_args(random_shards, run_dir), message)


def test_train_config_file_errors(
    tmp_path: Path, random_shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train: {lr: 1e-3\n")
    assert main(train_args(random_shards, tmp_path / "run", "--config", str(cfg))) == 2
    assert f"{cfg}: not valid YAML (line 2" in capsys.readouterr().err
    cfg.write_text("train: {lr: .inf}\n")
    args = train_args(random_shards, tmp_path / "run", "--config", str(cfg))
    _one_line_error(capsys, args, f"{cfg} train: / --set: lr=inf is not a finite number")
    assert (
        main(train_args(random_shards, tmp_path / "run", "--config", str(tmp_path / "no.yaml")))
        == 2
    )
    assert "no.yaml: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("studies: {main: {scales: [micro]\n", "not valid YAML (line 2, column 1)"),
        ("speed: 3\n", "config (top level): Additional properties are not allowed ('speed'"),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "train: {micro: {lr: fast}}\n",
            "config train.micro: lr='fast' is not a number",
        ),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "corpus: {name: '..'}\n",
            "'..' does not match",
        ),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "runtime: {checkpoint: {keep_last: 0}}\n",
            "config runtime: checkpoint.keep_last=0 must be >= 1",
        ),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "runtime: {keep_last: 0}\n",
            "config runtime: unknown key 'keep_last': valid keys are device",
        ),
        ("- studies\n- train\n", "study.yaml: is a YAML list, not a config: write its keys"),
        ("", "study.yaml: is empty, not a config"),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "train: {micro: {lr: .inf}}\n",
            "config train.micro: lr=inf is not a finite number",
        ),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "train: {micro: {total_tokens: 1e30}}\n",
            "config, cell micro/gpt2/tied/seed0: train.total_tokens=1e+30 is more than 1e+15",
        ),
        (
            "studies: {main: {scales: [micro], vocabs: [gpt2], variants: [tied]}}\n"
            "runtime: {log_line_s: -1}\n",
            "config runtime: log_line_s=-1.0 must be >= 0",
        ),
    ],
)
def test_config_show_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(content)
    _one_line_error(capsys, ["config", "show", "--configfile", str(path)], message)


@pytest.mark.parametrize("command", [["status"], ["preflight", "--profile", "profiles/slurm"]])
def test_a_yaml_list_as_config_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("- studies\n")
    monkeypatch.chdir(ROOT)
    _one_line_error(capsys, [*command, "--configfile", str(path)], f"{path}: is a YAML list")


def test_config_show_on_a_missing_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    args = ["config", "show", "--configfile", "config/nope.yaml"]
    _one_line_error(capsys, args, "config/nope.yaml: no such config file")


def test_a_closed_pipe_ends_quietly() -> None:
    """`leviathan params --json | head -c 1`: no BrokenPipeError, exit status 0. (The output,
    about 6 kB, outgrows what `head` reads before it closes the pipe.)"""
    run = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {BIN / 'leviathan'} params --json --variant all | head -c 1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "0"},
    )
    assert run.returncode == 0
    assert run.stderr == ""
    assert run.stdout == "{"


def test_target_of_a_cell_in_no_study_names_the_config_that_runs_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    args = ["target", "--scale", "tiny", "--vocab", "gpt2", "--variant", "leviathan"]
    line = _one_line_error(capsys, args, "--configfile config/tiny.yaml")
    assert "tiny/gpt2/leviathan/seed0 is in no study of config/config.yaml" in line
    assert main([*args, "--configfile", "config/tiny.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "results/runs/tiny/tiny/gpt2/leviathan/seed0/checkpoints/final/state.json"


def test_train_runtime_blocks_merge_key_by_key() -> None:
    """`--runtime` over a `--config` file's runtime: a block's keys one by one, so that setting
    one key of a block leaves the file's other keys of it as they are."""
    from leviathan.commands.train import runtime_config

    from_file = {"checkpoint": {"every": 4, "keep_last": 3}, "validation": {"windows": 8}}
    dotted = runtime_config(from_file, ["checkpoint.every=2"], Path("run.yaml"))
    assert (dotted.checkpoint.every, dotted.checkpoint.keep_last) == (2, 3)
    assert dotted.validation.windows == 8
    whole = runtime_config(from_file, ["checkpoint={background: false}"], None)
    assert (whole.checkpoint.every, whole.checkpoint.keep_last) == (4, 3)
    assert whole.checkpoint.background is False
    with pytest.raises(
        ValueError,
        match=r"^run.yaml runtime: / --runtime: checkpoint.every=-1 must be >= 0",
    ):
        runtime_config(from_file, ["checkpoint.every=-1"], Path("run.yaml"))

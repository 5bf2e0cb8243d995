"""The study is a DVC param: params.yaml's `study` names the config file every stage of dvc.yaml
passes to Snakemake and reads as params, so `dvc params diff` shows the study's own values and
choosing another study needs no copied files (real dvc and snakemake, in a scratch repository)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from workflow_helpers import BIN, ROOT, tool_env, workflow_copy

from leviathan import layout

DVC = str(BIN / "dvc")
ID = {"NAME": "CI", "EMAIL": "ci@example.org"}  # commits with or without a git identity
DVC_DIRS = ("GLOBAL_CONFIG", "SYSTEM_CONFIG", "SITE_CACHE")


def _run(cmd: list[str], cwd: Path) -> str:
    git_id = {f"GIT_{who}_{k}": v for who in ("AUTHOR", "COMMITTER") for k, v in ID.items()}
    dvc_dirs = {f"DVC_{k}_DIR": str(cwd.parent / f"dvc-{k.lower()}") for k in DVC_DIRS}
    env = {**tool_env(), "DVC_NO_ANALYTICS": "1", **git_id, **dvc_dirs}  # no user DVC config
    env.pop("SNAKEMAKE_PROFILE", None)
    run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{shlex.join(cmd)}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout + run.stderr


STUDY_ARGS = (
    "--config dvc_study_name=${study_name} dvc_corpus=${corpus} "
    f"--configfile ${{study}} {layout.DVC_OVERRIDES}"
)


def test_params_yaml_names_the_default_study() -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["study"] == layout.DEFAULT_CONFIG
    assert yaml.safe_load((ROOT / layout.DVC_OVERRIDES).read_text()) == {}
    for name, stage in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].items():
        assert stage["params"] == [
            "study",
            "study_name",
            "corpus",
            {"${study}": None},
            {layout.DVC_OVERRIDES: None},
        ], name
        assert stage["cmd"].count(STUDY_ARGS) == stage["cmd"].count("snakemake "), name


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's DVC set-up and workflow in a fresh git repository, committed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = workflow_copy(tmp_path_factory.mktemp("dvc_study"))
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".dvc/config", ".dvc/.gitignore"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    (repo / "src").mkdir()  # a stage dependency (the package runs from its installed copy)
    (repo / "src" / "README").write_text("the package's sources\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "project"]):
        _run(cmd, repo)
    return repo


def _planned(repo: Path, study: str, name: str, corpus: str = "embedded") -> str:
    """The data stage's command as `dvc repro --dry` renders it with params.yaml naming STUDY."""
    params = {"study": study, "study_name": name, "corpus": corpus}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    planned = _run([DVC, "repro", "--dry", "--single-item", "data"], repo)
    line = next(
        line for line in planned.splitlines() if line.startswith("> ") and "snakemake" in line
    )
    return line[line.index("snakemake") :]  # after the stage's `mkdir -p data/eval && `


def test_params_diff_shows_the_study_and_its_own_values(repo: Path) -> None:
    shown = _run([DVC, "params", "diff", "--all"], repo)
    assert "params.yaml" in shown
    assert "config/config.yaml" in shown
    assert "train.micro.total_tokens" in shown
    assert "20480" in shown
    try:
        planned = _planned(repo, "config/tiny.yaml", "tiny")
        assert planned.endswith(f"--configfile config/tiny.yaml {layout.DVC_OVERRIDES}")
        assert "dvc_study_name=tiny dvc_corpus=embedded" in planned
        changed = _run([DVC, "params", "diff"], repo)
        assert "config/tiny.yaml" in changed
        assert "train.tiny.total_tokens" in changed
        assert "409600" in changed  # the tiny study's own value, no file copied
    finally:
        (repo / "params.yaml").write_text((ROOT / "params.yaml").read_text())


@pytest.mark.slow
def test_the_stage_command_plans_the_chosen_study(repo: Path) -> None:
    """The data stage's command as DVC runs it (target first: Snakemake's --configfile takes
    several values), dry-run: it plans the tiny study's one vocabulary, not the default's three."""
    try:
        cmd = _planned(repo, "config/tiny.yaml", "tiny")
        wrong = _planned(repo, "config/tiny.yaml", "embedded")
    finally:
        (repo / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    out = _run(["bash", "-c", f"{cmd} --dry-run"], repo)
    assert "data/tokens/embedded/gpt2/train.bin" in out
    assert "o200k_base" not in out
    assert "cl100k_base" not in out
    # params.yaml naming the study's outputs otherwise than its file: refused before any job
    refused = subprocess.run(
        ["bash", "-c", f"{wrong} --dry-run"],
        cwd=repo,
        env=tool_env(),
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert (
        "set params.yaml's study_name: tiny and corpus: embedded" in refused.stdout + refused.stderr
    )

"""DVC versioning of the workflow through the real tools (git, dvc, snakemake, make), in a temporary
git repository holding a copy of the project's workflow files on the SMALL grid: `dvc repro` runs
the pipeline and is a no-op the second time; `dvc push` then `make pull` in a fresh clone restores
data, checkpoints and results without Snakemake wanting to retrain anything."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import BIN, ROOT, job_counts, small_config, snakemake, workflow_copy

from leviathan import layout
from leviathan.provenance import ALLOW_FOREIGN_ENV

pytestmark = pytest.mark.slow

VENV = Path(sys.executable).parent.parent
DVC = str(BIN / "dvc")
STAGES = ("data", "train", "evaluate", "report")
CELLS = [f"results/runs/embedded/micro/gpt2/{variant}/seed0" for variant in ("tied", "leviathan")]
# what the pipeline writes that DVC versions, the study's own (the step checkpoints are
# .dvcignore'd, not pushed)
TRACKED = (
    "data/corpus/embedded",
    "data/tokens/embedded",
    "data/eval",
    "results/runs/embedded",
    "results/eval/embedded",
    "results/report/embedded",
    "results/report/metrics/embedded",
)
REPORT_ZIP = "results/report/embedded/report.zip"


@dataclass(frozen=True)
class Built:
    repo: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess[str]
    remote: Path


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 1200
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 1200
) -> subprocess.CompletedProcess[str]:
    out = run(cmd, cwd, env, timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}: {out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def make(target: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The project's Makefile target with this interpreter's venv (installed: -o skips set-up)."""
    return run(["make", f"VENV={VENV}", "-o", f"{VENV}/.installed", target], cwd, env)


def versioned(path: Path) -> bool:
    """Not one of the .dvcignore'd intermediates of training (step checkpoints, set-aside runs)
    nor the study's record of its folder, nor a run's exit record."""
    parts = path.parts  # kept checkpoints (checkpoints/kept/step_*/) are versioned
    return path.name not in ("study.json", layout.EXIT) and not any(
        (p.startswith("step_") and parts[i - 1 : i] != ("kept",)) or ".stale-" in p
        for i, p in enumerate(parts)
    )


def files(root: Path) -> dict[str, str]:
    """sha256 of every versioned file under the tracked outputs, by path relative to `root`."""
    out = {}
    for name in TRACKED:
        path = root / name
        for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            if versioned(f.relative_to(root)):
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def stats(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under data/ and results/, step checkpoints included."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for d in ("data", "results")
        for p in sorted((root / d).rglob("*"))
        if p.is_file()
    }


def snakemake_runs(root: Path) -> int:
    """How many Snakemake invocations have run here (each one writes a log)."""
    logs = root / ".snakemake" / "log"
    return len(list(logs.iterdir())) if logs.is_dir() else 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The SMALL study in a fresh git repository with the project's DVC set-up, built by `dvc repro`
    (dvc.lock committed, as a release would be) and pushed to a temporary local remote."""
    base = tmp_path_factory.mktemp("dvc")
    repo, remote, home = base / "repo", base / "remote", base / "dvc-home"
    repo.mkdir()
    workflow_copy(repo)
    small_config(repo)
    # src/ is a dependency of every stage (the package itself runs from its installed copy)
    shutil.copytree(
        ROOT / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in (
        "dvc.yaml",
        "params.yaml",
        ".dvcignore",
        ".gitignore",
        "Makefile",
        ".dvc/config",
        ".dvc/.gitignore",
        ".dvc/plots/by_cell.json",
    ):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        ALLOW_FOREIGN_ENV: "1",  # the copied src/ is a stage dependency; the package runs from here
        # no user/system DVC config, no shared site cache: the test sees only the project's
        "DVC_GLOBAL_CONFIG_DIR": str(home / "global"),
        "DVC_SYSTEM_CONFIG_DIR": str(home / "system"),
        "DVC_SITE_CACHE_DIR": str(home / "site"),
        # commits and stashes in the repository and its clones, with or without a git identity
        "GIT_AUTHOR_NAME": "CI",
        "GIT_AUTHOR_EMAIL": "ci@example.org",
        "GIT_COMMITTER_NAME": "CI",
        "GIT_COMMITTER_EMAIL": "ci@example.org",
    }
    env.pop("SNAKEMAKE_PROFILE", None)
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "project"],
        [DVC, "remote", "modify", "--local", "local", "url", str(remote)],
    ):
        ok(cmd, repo, env)
    first = ok([DVC, "repro"], repo, env)
    ok(["git", "add", "dvc.lock"], repo, env)
    ok(["git", "commit", "-qm", "release record"], repo, env)
    pushed = ok([DVC, "push"], repo, env)
    assert "files pushed" in pushed.stdout + pushed.stderr
    yield Built(repo, env, first, remote)


def test_dvc_repro_runs_the_pipeline_then_is_a_no_op(built: Built) -> None:
    repo, env = built.repo, built.env
    out = built.first.stdout + built.first.stderr
    for stage in STAGES:
        assert f"Running stage '{stage}'" in out
    assert "Report created" in out
    assert (repo / REPORT_ZIP).is_file()
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(STAGES)
    outs = {stage: [o["path"] for o in lock["stages"][stage]["outs"]] for stage in STAGES}
    assert sorted(p for paths in outs.values() for p in paths) == sorted(TRACKED)
    for cell in CELLS:
        assert (repo / cell / "checkpoints/final/state.json").is_file()
    # the later stages wrote nothing into the earlier stages' outputs
    status = ok([DVC, "status"], repo, env)
    assert "Data and pipelines are up to date" in status.stdout
    before, runs = stats(repo), snakemake_runs(repo)
    again = make("repro", repo, env)  # `make repro` is `dvc repro` with the venv on PATH
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    text = again.stdout + again.stderr
    assert "Data and pipelines are up to date" in text
    assert "Running stage" not in text
    for stage in STAGES:
        assert f"Stage '{stage}' didn't change, skipping" in text
    assert snakemake_runs(repo) == runs
    assert stats(repo) == before
    assert not run(["git", "status", "--porcelain"], repo, env).stdout.strip()
    # what is no study artifact changes nothing DVC tracks: an ad-hoc run beside the study's,
    # a cell's logger folders, a set-aside metrics log
    litter = [
        repo / "results/runs/adhoc/metrics.jsonl",
        repo / CELLS[0] / "wandb/run.log",
        repo / CELLS[0] / "tensorboard/events.out",
        repo / CELLS[0] / "metrics.stale-1.jsonl",
    ]
    for path in litter:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    try:
        status = ok([DVC, "status"], repo, env)
        assert "Data and pipelines are up to date" in status.stdout, status.stdout
    finally:
        for path in litter:
            path.unlink()


def test_push_then_pull_into_a_fresh_clone_does_not_retrain(built: Built, tmp_path: Path) -> None:
    repo, env = built.repo, built.env
    clone = tmp_path / "clone"
    ok(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    ok([DVC, "remote", "modify", "--local", "local", "url", str(built.remote)], clone, env)
    assert not (clone / "data").exists()
    assert not (clone / ".dvc/cache").exists()
    pulled = make("pull", clone, env)
    assert pulled.returncode == 0, pulled.stdout[-3000:] + pulled.stderr[-3000:]
    assert "nothing will be retrained" in pulled.stdout
    # the same bytes: token shards, final checkpoints, metrics, evaluations, report, each with its manifest
    theirs, ours = files(repo), files(clone)
    assert ours == theirs
    for cell in CELLS:
        for name in ("model.safetensors", "model.safetensors.json", "optim.pt", "state.json"):
            assert f"{cell}/checkpoints/final/{name}" in ours
        assert f"{cell}/metrics.jsonl" in ours
    assert "data/tokens/embedded/gpt2/train.bin.json" in ours
    # intermediate training state stays local (.dvcignore): only final checkpoints travel
    assert list((repo / CELLS[0] / "checkpoints").glob("step_*"))
    assert not list((clone / CELLS[0] / "checkpoints").glob("step_*"))
    before = stats(clone)
    plan = snakemake(clone, "-n", "--profile", "profiles/local", "all")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "Nothing to be done" in plan.stdout + plan.stderr
    assert "missing provenance/metadata" not in plan.stdout + plan.stderr
    # and `snakemake all` for real runs nothing: no checkpoint, metric or result changes
    real = snakemake(clone, "--profile", "profiles/local", "all")
    assert real.returncode == 0
    assert "Nothing to be done" in real.stdout + real.stderr
    assert stats(clone) == before
    assert files(clone) == theirs
    assert "Data and pipelines are up to date" in ok([DVC, "status"], clone, env).stdout
    # the manifests came along: the provenance audit re-verifies table -> eval -> checkpoint -> shards
    audit = ok(
        [str(BIN / "leviathan"), "audit", "results/report/embedded/tables/main.csv", "-q"],
        clone,
        env,
    )
    assert "audit passed" in audit.stdout
    # DVC's own views work on the fresh clone: the same metrics as where they were made
    assert metrics_of(clone, env) == metrics_of(repo, env)
    # Snakemake's records are complete, as after a real run: a cell's own config change reruns it
    config = yaml.safe_load((clone / "config/config.yaml").read_text())
    config["train"]["micro/gpt2/leviathan/seed0"] = {"lr": 1e-3}
    (clone / "config/config.yaml").write_text(yaml.safe_dump(config))
    plan = snakemake(clone, "-n", "--profile", "profiles/local", "all")
    text = plan.stdout + plan.stderr
    assert job_counts(text).get("train") == 1
    assert "variant=leviathan" in text
    assert "variant=tied" not in text


def test_pull_marks_nothing_up_to_date_when_the_checkout_differs_from_dvc_lock(
    built: Built, tmp_path: Path
) -> None:
    env = built.env
    clone = tmp_path / "clone"
    ok(["git", "clone", "-q", str(built.repo), str(clone)], tmp_path, env)
    ok([DVC, "remote", "modify", "--local", "local", "url", str(built.remote)], clone, env)
    config = yaml.safe_load((clone / "config/config.yaml").read_text())
    config["train"]["micro"]["total_tokens"] *= (
        2  # an edit made before pulling: every cell trains longer
    )
    (clone / "config/config.yaml").write_text(yaml.safe_dump(config))
    pulled = make("pull", clone, env)
    assert pulled.returncode != 0
    assert "differs from dvc.lock" in pulled.stdout
    assert "modified:           train" in pulled.stdout  # the study's param (dvc status)
    assert (clone / CELLS[0] / "checkpoints/final/state.json").is_file()  # pulled, but not touched
    assert not (clone / ".snakemake").exists()  # no Snakemake run marked anything up to date
    # the recipe it prints: pull on the locked commit, then bring the edit back; Snakemake sees it
    ok(["git", "stash", "-q"], clone, env)
    pulled = make("pull", clone, env)
    assert pulled.returncode == 0, pulled.stdout[-3000:] + pulled.stderr[-3000:]
    ok(["git", "stash", "pop", "-q"], clone, env)
    plan = snakemake(clone, "-n", "--profile", "profiles/local", "all")
    counts = job_counts(plan.stdout + plan.stderr)
    assert counts.get("train") == 2
    assert "tokenize" not in counts


# ----------------------------------------------------------------------------- params, metrics, plots, experiments
METRICS = "results/report/embedded/tables/metrics.json"
DVC_METRICS = "results/report/metrics/embedded/"  # one file per cell of the study
LEV, TIED = "micro/gpt2/leviathan/seed0", "micro/gpt2/tied/seed0"


def metrics_of(repo: Path, env: dict[str, str]) -> dict[str, dict[str, float]]:
    """`dvc metrics show --json` of the workspace: cell -> its metrics file's content."""
    (workspace,) = json.loads(ok([DVC, "metrics", "show", "--json"], repo, env).stdout).values()
    return {
        path.removeprefix(DVC_METRICS).removesuffix(".json"): found["data"]
        for path, found in workspace["data"].items()
    }


def test_dvc_metrics_plots_and_params_show_the_study(built: Built, tmp_path: Path) -> None:
    repo, env = built.repo, built.env
    cells = metrics_of(repo, env)
    assert set(cells) == {LEV, TIED}
    # the numbers are the report's metrics table (the CSV the audit checks), not a copy made elsewhere
    table = pd.read_csv(repo / "results/report/embedded/tables/metrics.csv").set_index("row")
    assert cells[LEV]["val_loss"] == pytest.approx(table.loc[LEV, "val_loss"], rel=1e-12)
    assert {"val_loss", "val_ppl", "val_bpb", "val_loss_gain", "val_ppl_gain"} <= set(cells[LEV])
    assert {  # the offline stand-in data's numbers, under `stand_in.`
        "wikitext_ppl",
        "lambada_ppl",
        "downstream_mean_acc",
        "wikitext_ppl_gain",
        "lambada_ppl_gain",
        "downstream_gain_points",
    } <= set(cells[LEV]["stand_in"])
    assert "val_loss_gain" not in cells[TIED]
    assert cells[LEV]["evidence"] == "smoke test"  # 40 steps: below report.smoke_test.below_tokens
    text = ok([DVC, "metrics", "show"], repo, env).stdout
    assert DVC_METRICS + LEV in text
    assert "val_loss" in text
    audit = ok([str(BIN / "leviathan"), "audit", METRICS, "-q"], repo, env)
    assert "audit passed" in audit.stdout

    out = tmp_path / "plots"
    shown = ok([DVC, "plots", "show", "-o", str(out)], repo, env)
    html = (out / "index.html").read_text()
    assert "index.html" in shown.stdout
    plots = yaml.safe_load((repo / "dvc.yaml").read_text())["plots"]
    titles = [spec["title"] for p in plots if isinstance(p, dict) for spec in p.values()]
    assert len(titles) == 2
    assert all(title in html for title in titles)
    assert LEV in html
    assert TIED in html
    assert '"field": "cell"' in html
    assert (
        "results/report/embedded/figures/loss_curves.png" in html
    )  # the seaborn figures beside them

    params = ok([DVC, "params", "diff", "--all"], repo, env).stdout
    assert "config/config.yaml" in params
    assert "train.micro.total_tokens" in params
    assert "params.yaml" in params
    assert "study" in params


def test_exp_run_set_param_reruns_one_cell_and_diffs_show_it(built: Built) -> None:
    """`dvc exp run -S` on one cell's setting (Hydra's merge syntax: the cell key holds slashes):
    DVC reruns its stages, Snakemake inside retrains that cell only; `dvc params diff` and
    `dvc metrics diff` show the change, `dvc exp show` lists params and metrics side by side."""
    repo, env = built.repo, built.env
    before = metrics_of(repo, env)
    tied_ckpt = files(repo)[f"{CELLS[0]}/checkpoints/final/model.safetensors"]
    lev_ckpt = files(repo)[f"{CELLS[1]}/checkpoints/final/model.safetensors"]
    study_text = (repo / "config/config.yaml").read_text()
    override = f"config/dvc_overrides.yaml:++train={{{LEV}: {{lr: 0.0123}}}}"
    exp = ok([DVC, "exp", "run", "-S", override], repo, env)
    assert (repo / "config/config.yaml").read_text() == study_text  # the study's file as written
    text = exp.stdout + exp.stderr
    assert job_counts(text).get("train") == 1, text[-4000:]
    assert "variant=leviathan" in text
    assert "variant=tied" not in text
    assert (
        files(repo)[f"{CELLS[0]}/checkpoints/final/model.safetensors"] == tied_ckpt
    )  # not retrained
    assert files(repo)[f"{CELLS[1]}/checkpoints/final/model.safetensors"] != lev_ckpt
    after = metrics_of(repo, env)
    assert after[TIED] == before[TIED]
    assert after[LEV]["val_loss"] != before[LEV]["val_loss"]

    params = ok([DVC, "params", "diff"], repo, env).stdout
    assert f"train.{LEV}.lr" in params
    assert "0.0123" in params
    metrics = ok([DVC, "metrics", "diff"], repo, env).stdout
    assert f"{DVC_METRICS}{LEV}.json" in metrics
    assert f"{TIED}.json" not in metrics
    shown = ok([DVC, "exp", "show", "--csv"], repo, env).stdout
    header = shown.splitlines()[0].split(",")
    assert f"train.{LEV}.lr" in header
    assert f"{DVC_METRICS}{LEV}.json:val_loss" in header
    assert "train.micro.total_tokens" in header

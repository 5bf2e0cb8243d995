"""The workflow through real Snakemake, in a temporary copy of the project's workflow files."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import BIN, ROOT, job_counts, small_config, snakemake, workflow_copy

from leviathan.study.logs import LOGGER
from leviathan.train.schedule import keep_steps

SNAKEFMT = shutil.which("snakefmt", path=str(BIN))  # the formatter of the Snakefile and its rules
# a dry run on the shipped SLURM profile, its placeholders filled in as docs/slurm.md does
DRY_RUN = ("-n", "--default-resources", "slurm_account=a", "slurm_partition=p", "mem_mb=8000")


def test_paper_config_plans_the_whole_study_offline(tmp_path: Path) -> None:
    work = workflow_copy(tmp_path)
    t0 = time.time()
    out = snakemake(
        work, *DRY_RUN, "--configfile", "config/paper.yaml", "--profile", "profiles/slurm", "all"
    )
    assert out.returncode == 0, out.stderr
    # planning must not touch the (absent) data: seconds on a quiet machine; the bound leaves room
    # for a shared, loaded one
    assert time.time() - t0 < 300
    counts = job_counts(out.stdout + out.stderr)
    # main 3 scales x 2 (at 200m 3 seeds: 4 cells more) + ablation 6 at 400m (2 shared with
    # main) + vocabulary 3 x 2 at 200m (o200k seed0 shared with main): 10 + 4 + 4 = 18 cells
    assert counts["fetch_corpus"] == 1
    assert counts["fetch_eval_data"] == 7  # WikiText-103 and the six lm-eval tasks' datasets
    assert counts["tokenize"] == 3
    assert counts["train"] == 18
    assert counts["eval_val"] == counts["eval_wikitext"] == counts["eval_lm_eval"] == 18
    # every kept checkpoint (keep_at, up to each scale's steps) of every cell is evaluated
    spec = yaml.safe_load((ROOT / "config/paper.yaml").read_text())["runtime"]["checkpoint"]
    steps = {"200m": 16_022, "400m": 32_044, "1.2b": 91_935}  # the scales' own budgets
    cells = {"200m": 10, "400m": 6, "1.2b": 2}
    kept = {s: len(keep_steps(spec["keep_at"], n)) for s, n in steps.items()}
    # log2:512:2000: 0, 1, 2, 4, ..., 512 (11 steps), then every 2,000 up to the scale's steps
    assert kept == {"200m": 11 + 8, "400m": 11 + 16, "1.2b": 11 + 45}
    assert counts["eval_val_along"] == sum(cells[s] * kept[s] for s in steps)
    jobs = _job_resources(out.stdout + out.stderr)
    for rule in ("eval_val", "eval_wikitext", "eval_lm_eval", "eval_val_along"):  # on GPUs too
        assert len(jobs[rule]) == counts[rule]
        assert all("gpu=1" in r for r in jobs[rule]), jobs[rule]
        assert all("gpu_model=h100" in r for r in jobs[rule]), jobs[rule]
    assert counts["word_counts"] == 3
    # tied baseline + others per (scale, vocab, seed): 200m/400m/1.2b o200k (200m: 3 seeds),
    # 200m gpt2, 200m cl100k; the same groups along training
    assert counts["sample_efficiency"] == counts["along_training"] == 7
    assert counts["report"] == 1
    assert counts["all"] == 1


@pytest.mark.parametrize("target", ["all", "all_data"])
def test_a_target_after_configfile_with_equals_plans_what_it_names(
    tmp_path: Path, target: str
) -> None:
    """`--configfile=FILE` takes one file, so a target may follow it: the same jobs as with the
    target first. Without `=`, --configfile takes every word after it, the target too."""
    work = workflow_copy(tmp_path)
    last = snakemake(
        work, "-n", "--profile", "profiles/local", "--configfile=config/tiny.yaml", target
    )
    first = snakemake(
        work, target, "-n", "--profile", "profiles/local", "--configfile", "config/tiny.yaml"
    )
    assert last.returncode == 0 and first.returncode == 0, last.stderr[-2000:]
    counts = job_counts(last.stdout + last.stderr)
    assert counts == job_counts(first.stdout + first.stderr)
    assert counts[target] == 1
    # tiny.yaml's two cells, not the default's; all_data trains nothing
    assert counts.get("train", 0) == (0 if target == "all_data" else 2)
    assert counts.get("report", 0) == (1 if target == "all" else 0)
    spaced = snakemake(
        work, "-n", "--profile", "profiles/local", "--configfile", "config/tiny.yaml", target
    )
    assert spaced.returncode != 0
    assert f"No such file or directory: '{target}'" in spaced.stdout + spaced.stderr


def test_no_file_at_the_root_is_named_after_a_rule() -> None:
    """A target is never read as a config file: no root file shadows a rule's name."""
    files = [ROOT / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")]
    rules = {r for f in files for r in re.findall(r"^rule (\w+):", f.read_text(), flags=re.M)}
    assert {"all", "all_data", "all_train", "all_eval", "all_report", "all_export"} <= rules
    assert not [r for r in rules if (ROOT / r).exists()]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(bogus=1), "bogus"),
        (lambda c: c["studies"]["main"].update(variants=["tied", "leviathn"]), "leviathn"),
        (lambda c: c["runtime"]["validation"].update(every="often"), "often"),
        (lambda c: c["train"].update({"micro": {"learning_rate": 1.0}}), "learning_rate"),
        (lambda c: c["evaluate"]["lm_eval"].update(tasks=["piqa"]), "not in lm_eval.tasks"),
        (lambda c: c["evaluate"]["wikitext"].update(strde=3), "strde"),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path: Path, edit, message: str) -> None:
    work = workflow_copy(tmp_path)
    config = yaml.safe_load((work / "config" / "config.yaml").read_text())
    edit(config)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    out = snakemake(work, "-n", "--profile", "profiles/local", "all")
    assert out.returncode != 0
    assert message in out.stdout + out.stderr
    assert not (work / "data").exists()
    assert not (work / "results").exists()


def test_workflow_lints_clean() -> None:
    out = snakemake(ROOT, "--lint", "--nolock")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Congratulations" in out.stdout + out.stderr


@pytest.mark.skipif(SNAKEFMT is None, reason="snakefmt is not installed (the `test` extra has it)")
def test_snakefmt_leaves_the_workflow_unchanged() -> None:
    out = subprocess.run(
        [str(SNAKEFMT), "--check", "Snakefile", "workflow/rules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"run `make fmt` (snakefmt):\n{out.stdout}{out.stderr}"


@pytest.mark.slow
def test_micro_grid_end_to_end_and_single_cell_rerun(tmp_path: Path) -> None:
    work = workflow_copy(tmp_path)
    config = small_config(work)
    out = snakemake(work, "--profile", "profiles/local", "all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for variant in ("tied", "leviathan"):
        assert (
            work / f"results/runs/embedded/micro/gpt2/{variant}/seed0/checkpoints/final/state.json"
        ).is_file()
    assert (work / "data/tokens/embedded/gpt2/counts.npy").is_file()
    for evaluation in ("val", "wikitext", "lm_eval"):
        assert (
            work / f"results/eval/embedded/micro/gpt2/leviathan/seed0/{evaluation}.json"
        ).is_file()
    assert (work / "results/eval/embedded/micro/gpt2/sample_efficiency_seed0.json").is_file()
    # every job wrote its log (rules fetch_corpus ... report: one line naming the job at least)
    logs = sorted((work / "logs").rglob("*.log"))
    assert {p.relative_to(work / "logs").parts[0] for p in logs} >= {
        "fetch_corpus",
        "tokenize",
        "word_counts",
        "train",
        "eval",
        "report",
    }
    for log in logs:  # each job's first line names it (a train job's: with its attempt)
        assert re.search(rf"{re.escape(LOGGER)}: (attempt \d+ of )?rule ", log.read_text()), log
    metrics = pd.read_csv(
        work / "results/report/embedded/tables/metrics.csv", dtype={"stand_in_data": str}
    )
    assert list(metrics["row"]) == ["micro/gpt2/tied/seed0", "micro/gpt2/leviathan/seed0"]
    # the default config scores WikiText and lm-eval on the offline stand-ins: labelled as such,
    # and nothing else is
    for labels in metrics["stand_in_data"]:
        marked = set(labels.split(";"))
        assert {"wikitext_ppl", "downstream_mean_acc"} <= marked
        assert not any(m.startswith("val_") for m in marked)
    for name in (
        "metrics",
        "main",
    ):  # (paper_vs_ours has no number of ours at micro: nothing to mark)
        md = (work / f"results/report/embedded/tables/{name}.md").read_text()
        assert "\u2020 computed on the offline stand-in data" in md, name
    again = snakemake(work, "-n", "--profile", "profiles/local", "all")
    assert "Nothing to be done" in again.stdout + again.stderr
    # how training runs (config.runtime) is not part of a cell's identity: nothing reruns
    config["runtime"].update(log_every=5)
    config["runtime"]["checkpoint"].update(keep_last=3)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    again = snakemake(work, "-n", "--profile", "profiles/local", "all")
    assert "Nothing to be done" in again.stdout + again.stderr
    # an evaluation's settings rerun that evaluation of every cell (and the report), nothing else
    evaluate = copy.deepcopy(config["evaluate"])
    config["evaluate"]["val"]["max_windows"] = 4
    config["evaluate"]["lm_eval"]["bootstrap_iters"] = 10
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    plan = snakemake(work, "-n", "--profile", "profiles/local", "all")
    counts = job_counts(plan.stdout + plan.stderr)
    assert counts.get("eval_val") == counts.get("eval_lm_eval") == 2, counts
    assert not {"train", "eval_wikitext", "tokenize"} & set(counts), counts
    assert counts.get("report") == 1
    config["evaluate"] = evaluate
    # one cell's own override reruns that cell only
    config["train"]["micro/gpt2/leviathan/seed0"] = {"lr": 1e-3}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    plan = snakemake(work, "-n", "--profile", "profiles/local", "all")
    counts = job_counts(plan.stdout + plan.stderr)
    assert counts.get("train") == 1
    assert "fetch_corpus" not in counts
    assert "tokenize" not in counts
    # what depends on that cell: its 3 evaluations, the group's sample efficiency, the report
    assert counts.get("eval_val") == counts.get("eval_lm_eval") == 1
    assert counts.get("report") == 1
    assert "variant=leviathan" in plan.stdout + plan.stderr
    rerun = snakemake(work, "--profile", "profiles/local", "all")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    state = yaml.safe_load(
        (
            work / "results/runs/embedded/micro/gpt2/leviathan/seed0/checkpoints/final/state.json"
        ).read_text()
    )
    assert state["train_config"]["lr"] == 1e-3
    assert (work / "results/runs/embedded/micro/gpt2/leviathan/seed0/checkpoints.stale-1").is_dir()
    _a_second_study_touches_no_file_of_the_first(work, config)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _a_second_study_touches_no_file_of_the_first(work: Path, config: dict) -> None:  # type: ignore[type-arg]
    """A second study of the same corpus in the same clone (its own file and `study_name`, run
    with other parallelism), one of its cells trained: every file of the first study, and the
    data they share, is as it was; the new cell has its own folder. Switching back to the first
    study and to the second again plans nothing; a third file naming the second study is
    refused before any job."""
    first = _files(work / "results")
    data = _files(work / "data")
    second = {**copy.deepcopy(config), "study_name": "second"}
    second["tokenize"] = {"threads": 1, "processes": 2}  # how it runs: rebuilds no shard
    (work / "config" / "second.yaml").write_text(yaml.safe_dump(second))
    target = "results/runs/second/micro/gpt2/tied/seed0/checkpoints/final/state.json"
    run = ("--profile", "profiles/local", "--configfile", "config/second.yaml")
    out = snakemake(work, target, *run)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (work / target).is_file()
    after = _files(work / "results")
    assert {k: after.get(k) for k in first} == first
    assert all(k.startswith("runs/second/") for k in set(after) - set(first))
    assert _files(work / "data") == data
    for plan in (("all", "--profile", "profiles/local"), (target, *run)):  # back, then again
        again = snakemake(work, "-n", *plan)
        assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]
    (work / "config" / "third.yaml").write_text(yaml.safe_dump(second))
    refused = snakemake(
        work, "-n", "all", "--profile", "profiles/local", "--configfile", "config/third.yaml"
    )
    assert refused.returncode != 0
    assert "study_name 'second': results/*/second/ hold the study of config/second.yaml" in (
        refused.stdout + refused.stderr
    )


def _job_resources(output: str) -> dict[str, list[str]]:
    """rule -> the `resources:` line of each of its jobs in a dry run's output."""
    out: dict[str, list[str]] = {}
    rule = None
    for line in output.splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("resources:") and rule:
            out.setdefault(rule, []).append(line.strip())
    return out


def test_slurm_settings_per_scale_and_the_users_set_resources_reach_the_jobs(
    tmp_path: Path,
) -> None:
    """config resources.<scale> SLURM keys reach that scale's training jobs; a scale without them
    keeps the profile's default-resources; a user profile's set-resources is not hidden (the
    workflow ships no profile of its own that would replace it), and the rules' own resources
    (config rule_resources) stay under it."""
    work = workflow_copy(tmp_path)
    config = small_config(work)
    config["studies"]["main"]["scales"] = ["micro", "tiny"]
    config["resources"] = {
        "micro": {"slurm_partition": "gpu-a", "qos": "long", "slurm_extra": "--exclusive"}
    }
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    profile = work / "userprofile"
    profile.mkdir()
    user = {
        **yaml.safe_load((ROOT / "profiles/local/config.yaml").read_text()),
        "default-resources": {"slurm_partition": "everyday", "mem_mb": 1000},
        "set-resources": {"eval_val": {"slurm_partition": "evalq"}},
    }
    (profile / "config.yaml").write_text(yaml.safe_dump(user))
    out = snakemake(work, "-n", "--profile", str(profile), "all")
    assert out.returncode == 0, out.stderr
    jobs = _job_resources(out.stdout + out.stderr)
    train = sorted(jobs["train"])
    assert len(train) == 4
    micro = [r for r in train if "slurm_partition=gpu-a" in r]
    tiny = [r for r in train if "slurm_partition=everyday" in r]
    assert len(micro) == 2
    assert len(tiny) == 2
    assert all("qos=long" in r for r in micro)
    assert all("slurm_extra=--exclusive" in r for r in micro)
    assert not any("qos=" in r or "slurm_extra" in r for r in tiny)
    assert all(
        "slurm_partition=evalq" in r and "mem_mb=4000" in r for r in jobs["eval_val"]
    )  # CPU scales without eval_resources evaluate with their training job's resources
    assert all("slurm_partition=everyday" in r for r in jobs["tokenize"])
    assert all("mem_mb=4000" in r for r in jobs["tokenize"])


def test_scale_config_plans_multi_node_fsdp_jobs(tmp_path: Path) -> None:
    """config/scale.yaml (3b and 7b, tied and leviathan) dry-runs on the SLURM profile: four
    training jobs of 4 and 8 nodes, each launching torchrun per node with parallel=fsdp."""
    work = workflow_copy(tmp_path)
    out = snakemake(
        work, *DRY_RUN, "--configfile", "config/scale.yaml", "--profile", "profiles/slurm", "all"
    )
    assert out.returncode == 0, out.stderr
    counts = job_counts(out.stdout + out.stderr)
    assert counts["train"] == 4
    jobs = _job_resources(out.stdout + out.stderr)["train"]
    assert sorted(int(re.search(r"--nodes=(\d+)", r).group(1)) for r in jobs) == [4, 4, 8, 8]
    from leviathan.cells import Cell
    from leviathan.study.config import resolve
    from leviathan.study.launch import train_command

    config = resolve([ROOT / "config" / "scale.yaml"], root=ROOT)
    command = train_command(Cell("7b", "o200k_base", "leviathan", 0, "pile"), config, "t", "r")
    assert "--nnodes=8" in command and "--runtime parallel=fsdp" in command

"""The users' main command, `snakemake --profile slurm all`, on a real single-node SLURM cluster
(ci/local_slurm.sh: slurmctld + slurmd + slurmdbd, fake GPUs through gres), in a temporary copy
of the workflow on a tiny micro config. What is checked goes through SLURM's own accounting
(`sacct`), not through Snakemake's word.

1. first run: `snakemake --profile profiles/slurm all` (the shipped profile, unmodified) with the
   account/partition given on the command line exactly as docs/slurm.md says. One SLURM job per
   rule instance, with the CI account, partition and a time limit; training jobs got the GPU
   they asked for; one cell is broken on purpose: Snakemake reports it with its SLURM log, tries
   it as often as the profile's `retries` say, and `keep-going` finishes what does not depend on it.
2. rerun: the profile installed as the user's `slurm` profile with the placeholders filled in
   (docs/slurm.md), the broken cell fixed and one new cell added; `snakemake --profile slurm all`
   trains those two cells only. The new cell's training job is cancelled mid-run with `scancel`
   (SIGTERM): it checkpoints, the profile's retry resumes it from that checkpoint (the training
   log's start record says from which step), and the run ends complete.
3. `leviathan preflight` against the same cluster: the real sacctmgr, sinfo and srun answer.

Every test that needs the cluster is in this one module: `make test` runs a module whole on one
worker (`--dist loadfile`), so one worker starts and stops the cluster.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from leviathan.provenance import ALLOW_FOREIGN_ENV

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
LEVIATHAN = str(Path(sys.executable).with_name("leviathan"))
PROFILE = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
RETRIES = int(PROFILE.get("retries", 0))
FAST_STATUS = ["--slurm-init-seconds-before-status-checks", "2"]  # default 40 s: only for tests

STEPS = 6  # training steps of a cell (8 sequences x 64 tokens each)
GOOD = "micro/gpt2/tied/seed0"
# a learning rate that diverges at once: a valid config (checked when it is resolved) whose
# cell fails only in its job, with the trainer's one-line reason
BROKEN = "micro/gpt2/leviathan/seed0"
CANCELLED = "micro/gpt2/untied/seed0"  # added in the rerun, cancelled mid-run
RESULTS = "embedded"  # the default config's results key (its corpus): results/runs/<key>/<cell>
CANCELLED_STEPS = 16
TRAIN_PARTITION = "gpu"  # ci/local_slurm.sh's second partition (SLURM_LOCAL_PARTITION2)
CONFIG: dict[str, Any] = {
    "studies": {
        "main": {
            "scales": ["micro"],
            "vocabs": ["gpt2"],
            "variants": ["tied", "leviathan"],
            "seeds": [0],
        }
    },
    "train": {"micro": {"total_tokens": 8 * 64 * STEPS}, BROKEN: {"lr": 1e30}},
    # checkpoint.every beyond any run's length: the only step checkpoint a run can have is the
    # one written on SIGTERM
    "runtime": {
        "validation": {"every": 3, "windows": 4},
        "checkpoint": {"every": 1000},
        "threads": 1,
        "restart_on_mismatch": True,
    },
    # micro training jobs ask one (fake) GPU and one CPU each: two run side by side on the CI node;
    # they go to the partition the config names, every other job to the profile's default one
    "resources": {
        "micro": {
            "gpus": 1,
            "cpus_per_gpu": 1,
            "mem_mb": 2000,
            "runtime": 10,
            "slurm_partition": TRAIN_PARTITION,
        }
    },
    # evaluation runs where training ran, but these (fake) GPUs cannot run it: CPU jobs, said so
    "eval_resources": {"micro": {"gpus": 0, "cpus": 1, "mem_mb": 2000, "runtime": 10}},
    # validation only (WikiText and lm-eval are the same job shape, just slower)
    "evaluate": {
        "val": {"batch_size": 16, "max_windows": 8},
        "word_counts": {},
        "wikitext": None,
        "lm_eval": None,
    },
}


# ----------------------------------------------------------------------------- helpers
def workflow_copy(dest: Path) -> Path:
    """The workflow files in a temporary directory (as tests/workflow/test_snakemake.py does)."""
    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def write_config(work: Path, overrides: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config.update(copy.deepcopy(overrides))
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))


def account_args(cluster: Any) -> list[str]:
    """The command-line override of docs/slurm.md of the profile's account/partition placeholders. A
    command-line --default-resources replaces the profile's whole block, so the block's other
    entries are repeated."""
    resources = {
        **PROFILE["default-resources"],
        "slurm_account": cluster.account,
        "slurm_partition": cluster.partition,
    }
    return ["--default-resources", *(f"{k}={v}" for k, v in resources.items())]


def sm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        ALLOW_FOREIGN_ENV: "1",  # the copied workflow runs this checkout's package
        **(extra or {}),
    }


def start_snakemake(
    work: Path, args: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SNAKEMAKE, *args],
        cwd=work,
        env=sm_env(env),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    """Wait for snakemake; past the timeout interrupt it as a user would (SIGINT makes it
    scancel its jobs; waiting on the cluster, it ignores SIGTERM)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"snakemake did not finish within {timeout:.0f} s:\n{out[-6000:]}")
    return proc.returncode, out


def snakemake(
    work: Path, args: list[str], timeout: float = 480, env: dict[str, str] | None = None
) -> tuple[int, str]:
    return finish(start_snakemake(work, args, env), timeout)


@dataclass(frozen=True)
class Planned:
    """One job of a dry run."""

    rule: str
    wildcards: tuple[tuple[str, str], ...]
    local: bool
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def comment(self) -> str:
        """The --comment the SLURM plugin gives the job: rule_<rule>[_wildcards_<values>]."""
        values = "_".join(v for _, v in self.wildcards).replace("/", "_")
        return f"rule_{self.rule}_wildcards_{values}" if values else f"rule_{self.rule}"

    @property
    def submitted(self) -> bool:
        return not self.local and bool(self.outputs)  # a rule without output (all) runs nowhere


def plan(work: Path, args: list[str], env: dict[str, str] | None = None) -> list[Planned]:
    """The jobs Snakemake would run, from a dry run with the same arguments."""
    rc, out = snakemake(work, [*args, "--dry-run"], timeout=120, env=env)
    assert rc == 0, out[-4000:]
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", out)[1:]:
        head = re.match(r"(local)?rule (\w+):", block)
        assert head, block[:200]

        def field(key: str, block: str = block) -> list[str]:
            m = re.search(rf"^\s+{key}: (.*)$", block, re.M)
            return m.group(1).split(", ") if m else []

        wildcards = tuple(tuple(kv.split("=", 1)) for kv in field("wildcards"))
        jobs.append(
            Planned(
                head.group(2),
                wildcards,
                bool(head.group(1)),
                tuple(field("input")),  # type: ignore[arg-type]
                tuple(field("output")),
            )
        )
    return jobs


def downstream(planned: list[Planned], of: Planned) -> set[Planned]:
    """The planned jobs that need `of`'s outputs, directly or not."""
    found: set[Planned] = set()
    produced = set(of.outputs)
    changed = True
    while changed:
        changed = False
        for p in planned:
            if p not in found and p != of and produced.intersection(p.inputs):
                found.add(p)
                produced.update(p.outputs)
                changed = True
    return found


def cell_wildcards(cell: str, results: str = RESULTS) -> tuple[tuple[str, str], ...]:
    """A train job's wildcards: the study's results key (the default config's corpus), then
    the cell's."""
    scale, vocab, variant, seed = cell.split("/")
    return (
        ("results", results),
        ("scale", scale),
        ("vocab", vocab),
        ("variant", variant),
        ("seed", seed.removeprefix("seed")),
    )


def train_job(planned: list[Planned], cell: str) -> Planned:
    (job,) = [p for p in planned if p.rule == "train" and p.wildcards == cell_wildcards(cell)]
    return job


def cell_comment(cell: str) -> str:
    return Planned("train", cell_wildcards(cell), False, (), ()).comment


def run_id(output: str) -> str:
    m = re.search(r"SLURM run ID: (\S+)", output)
    assert m, (
        "no SLURM run ID in snakemake's output: did it use the slurm executor?\n" + output[-3000:]
    )
    return m.group(1)


SACCT_FIELDS = [
    "JobID",
    "State",
    "ExitCode",
    "Account",
    "Partition",
    "Comment",
    "AllocTRES",
    "Timelimit",
]
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


def sacct(run: str) -> list[dict[str, str]]:
    """SLURM's accounting records of the jobs of one snakemake run (job name = its run ID),
    once they have all ended (slurmdbd may lag a moment behind squeue)."""
    cmd = [
        "sacct",
        "-X",
        "-P",
        "-n",
        "-S",
        "now-12hours",
        "--name",
        run,
        "-o",
        ",".join(SACCT_FIELDS),
    ]
    jobs: list[dict[str, str]] = []
    for _ in range(60):
        lines = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
        jobs = [dict(zip(SACCT_FIELDS, line.split("|"), strict=True)) for line in lines if line]
        for job in jobs:
            job["State"] = job["State"].split()[0]  # "CANCELLED by 0" -> "CANCELLED"
        if jobs and all(j["State"] in ENDED for j in jobs):
            return sorted(jobs, key=lambda j: int(j["JobID"]))
        time.sleep(0.5)
    raise AssertionError(f"sacct: the jobs of run {run} have not ended after 30 s: {jobs}")


def by_comment(jobs: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for job in jobs:
        out.setdefault(job["Comment"], []).append(job)
    return out


def final_state(work: Path, cell: str) -> Path:
    return work / "results" / "runs" / RESULTS / cell / "checkpoints" / "final" / "state.json"


def metrics(work: Path, cell: str, record_type: str) -> list[dict[str, Any]]:
    path = work / "results" / "runs" / RESULTS / cell / "metrics.jsonl"
    records = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            continue
    return [r for r in records if r.get("kind") == record_type]


# ----------------------------------------------------------------------------- runs
@dataclass
class Run:
    plan: list[Planned]
    rc: int
    output: str
    jobs: list[dict[str, str]]
    seconds: float
    cancelled: tuple[str, int] | None = None  # (SLURM job id, last step logged before scancel)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = workflow_copy(tmp_path_factory.mktemp("slurm_workflow"))
    write_config(work, CONFIG)
    return work


@pytest.fixture(scope="module")
def first_run(slurm_cluster: Any, work: Path) -> Run:
    """`snakemake --profile profiles/slurm all` + docs/slurm.md's account/partition override."""
    args = ["--profile", "profiles/slurm", *account_args(slurm_cluster), *FAST_STATUS, "all"]
    planned = plan(work, args)
    t0 = time.monotonic()
    rc, out = snakemake(work, args)
    return Run(planned, rc, out, sacct(run_id(out)), time.monotonic() - t0)


@pytest.fixture(scope="module")
def user_profile(slurm_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The shipped profile installed as the user's `slurm` profile with the two placeholders
    filled in (docs/slurm.md); XDG_CONFIG_HOME stands in for ~/.config."""
    home = tmp_path_factory.mktemp("xdg_config")
    text = (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
    assert '"<your-account>"' in text
    assert '"<your-partition>"' in text
    text = text.replace("<your-account>", slurm_cluster.account).replace(
        "<your-partition>", slurm_cluster.partition
    )
    (home / "snakemake" / "slurm").mkdir(parents=True)
    (home / "snakemake" / "slurm" / "config.yaml").write_text(text)
    return {"XDG_CONFIG_HOME": str(home)}


@pytest.fixture(scope="module")
def rerun(first_run: Run, work: Path, user_profile: dict[str, str]) -> Run:
    """Broken cell fixed, one cell added; `snakemake --profile slurm all`, during which the new
    cell's training job is cancelled with scancel once it has logged two steps."""
    config = copy.deepcopy(CONFIG)
    del config["train"][BROKEN]
    config["studies"]["main"]["variants"].append(CANCELLED.split("/")[2])
    config["train"][CANCELLED] = {"total_tokens": 8 * 64 * CANCELLED_STEPS}
    write_config(work, config)
    args = ["--profile", "slurm", *FAST_STATUS, "all"]
    planned = plan(work, args, user_profile)
    t0 = time.monotonic()
    proc = start_snakemake(work, args, user_profile)
    comment, cancelled = cell_comment(CANCELLED), None
    deadline = time.monotonic() + 300
    try:
        while cancelled is None and time.monotonic() < deadline and proc.poll() is None:
            logged = [r["step"] for r in metrics(work, CANCELLED, "train")]
            if logged and max(logged) >= 2:  # mid-run: a few steps in, far from the end
                queue = subprocess.run(
                    ["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True, check=True
                )
                mine = [
                    line.split("|")
                    for line in queue.stdout.splitlines()
                    if line.split("|")[1] == comment
                ]
                assert len(mine) == 1, queue.stdout
                assert mine[0][2] == "RUNNING", queue.stdout
                subprocess.run(["scancel", mine[0][0]], check=True)
                cancelled = (mine[0][0], max(logged))
            time.sleep(0.2)
    except BaseException:
        proc.send_signal(signal.SIGINT)  # snakemake cancels its jobs and exits
        proc.communicate(timeout=90)
        raise
    rc, out = finish(proc, timeout=max(60.0, deadline - time.monotonic() + 120))
    return Run(planned, rc, out, sacct(run_id(out)), time.monotonic() - t0, cancelled)


# ----------------------------------------------------------------------------- 1. first run
def test_every_job_ran_through_slurm_with_the_ci_account(
    first_run: Run, slurm_cluster: Any
) -> None:
    submitted = [p for p in first_run.plan if p.submitted]
    assert {p.rule for p in submitted} >= {"fetch_corpus", "tokenize", "train"}
    broken = train_job(first_run.plan, BROKEN)
    blocked = downstream(first_run.plan, broken)
    expected = {p.comment for p in submitted if p not in blocked}
    jobs = by_comment(first_run.jobs)
    # everything planned that does not need the broken cell ran under SLURM, and nothing else
    assert set(jobs) == expected, (sorted(jobs), sorted(expected), first_run.output[-4000:])
    for comment, runs in jobs.items():
        states = [j["State"] for j in runs]
        if comment == broken.comment:
            assert states == ["FAILED"] * (1 + RETRIES), states  # as often as the profile says
        else:
            assert states == ["COMPLETED"], (comment, states)  # one job per rule instance
    assert slurm_cluster.partition2 == TRAIN_PARTITION != slurm_cluster.partition
    for job in first_run.jobs:
        # training: the partition the workflow config names for its scale; the rest: the default-resources one
        partition = (
            TRAIN_PARTITION if job["Comment"].startswith("rule_train_") else slurm_cluster.partition
        )
        assert (job["Account"], job["Partition"]) == (slurm_cluster.account, partition), job
        assert job["Timelimit"] not in {"UNLIMITED", "Partition_Limit", ""}, (
            job
        )  # every job has a runtime


def test_training_jobs_got_the_gpu_they_asked_for(first_run: Run) -> None:
    asked = CONFIG["resources"]["micro"]
    train = [j for j in first_run.jobs if j["Comment"].startswith("rule_train_")]
    assert len(train) == sum(p.rule == "train" for p in first_run.plan) + RETRIES
    for job in train:
        tres = dict(kv.split("=", 1) for kv in job["AllocTRES"].split(","))
        assert tres.get("gres/gpu") == str(asked["gpus"]), job
        assert tres.get("cpu") == str(asked["gpus"] * asked["cpus_per_gpu"]), job
    for job in first_run.jobs:
        if job not in train:
            assert "gres/gpu" not in job["AllocTRES"], job  # only training asks for GPUs


def test_failed_cell_is_reported_with_its_slurm_log_and_the_rest_completes(
    first_run: Run, work: Path
) -> None:
    assert first_run.rc != 0
    out = first_run.output
    failed = [j for j in first_run.jobs if j["State"] == "FAILED"]
    assert {j["Comment"] for j in failed} == {cell_comment(BROKEN)}
    for job in failed:
        log = (
            Path(PROFILE["slurm-logdir"])
            / "rule_train"
            / "_".join(v for _, v in cell_wildcards(BROKEN))
            / f"{job['JobID']}.log"
        )
        assert str(log) in out, f"snakemake does not name the SLURM log {log}:\n{out[-4000:]}"
        assert (work / log).is_file()
    assert "Error in rule train" in out
    train_log = Path("logs") / "train" / RESULTS / f"{BROKEN}.log"
    assert str(train_log) in out
    assert "non-finite training loss" in (work / train_log).read_text()  # the trainer says why
    # --keep-going (in the profile): what does not need the broken cell finished
    assert final_state(work, GOOD).is_file()
    assert not final_state(work, BROKEN).is_file()
    for p in first_run.plan:
        if p.submitted and p not in downstream(first_run.plan, train_job(first_run.plan, BROKEN)):
            assert all((work / f).exists() for f in p.outputs) or p.comment == cell_comment(
                BROKEN
            ), p


# ----------------------------------------------------------------------------- 2. rerun
def test_rerun_after_fixing_the_config_redoes_no_finished_cell(
    first_run: Run, rerun: Run, work: Path, user_profile: dict[str, str]
) -> None:
    assert rerun.rc == 0, rerun.output[-5000:]
    assert sorted(p.wildcards for p in rerun.plan if p.rule == "train") == sorted(
        [cell_wildcards(BROKEN), cell_wildcards(CANCELLED)]
    )
    assert not {"fetch_corpus", "tokenize"} & {p.rule for p in rerun.plan}
    trained = {j["Comment"] for j in rerun.jobs if j["Comment"].startswith("rule_train_")}
    assert trained == {cell_comment(BROKEN), cell_comment(CANCELLED)}
    # the user's own profile (default-resources partition) does not hide the config's training partition
    assert {j["Partition"] for j in rerun.jobs if j["Comment"].startswith("rule_train_")} == {
        TRAIN_PARTITION
    }
    # no job that completed in the first run ran again (the good cell: neither trained nor evaluated)
    completed = {j["Comment"] for j in first_run.jobs if j["State"] == "COMPLETED"}
    assert cell_comment(GOOD) in completed
    assert not completed & {j["Comment"] for j in rerun.jobs}, rerun.jobs
    assert [r["step"] for r in metrics(work, GOOD, "start")] == [0]
    for cell in (GOOD, BROKEN, CANCELLED):
        assert final_state(work, cell).is_file(), cell
    rc, out = snakemake(
        work, ["--profile", "slurm", "--dry-run", "all"], timeout=120, env=user_profile
    )
    assert rc == 0, out[-3000:]
    assert "Nothing to be done" in out, out[-3000:]


# ----------------------------------------------------------------------------- 3. scancel
def test_cancelled_training_job_resumes_from_its_sigterm_checkpoint(rerun: Run, work: Path) -> None:
    assert rerun.cancelled is not None, (
        f"the training job was never seen mid-run:\n{rerun.output[-4000:]}"
    )
    job_id, logged = rerun.cancelled
    assert rerun.rc == 0, rerun.output[-5000:]
    states = [(j["JobID"], j["State"]) for j in by_comment(rerun.jobs)[cell_comment(CANCELLED)]]
    assert states[0] == (job_id, "CANCELLED"), states
    assert [s for _, s in states[1:]] == ["COMPLETED"], states
    assert f"{PROFILE['slurm-logdir']}/rule_train/" in rerun.output
    assert f"{job_id}.log" in rerun.output

    starts = metrics(work, CANCELLED, "start")
    assert len(starts) == 2, starts
    assert starts[0]["resumed_from"] is None, starts
    assert starts[0]["step"] == 0, starts
    resumed = starts[1]
    # from a step checkpoint that only SIGTERM can have written (its interval is beyond the run)
    assert CONFIG["runtime"]["checkpoint"]["every"] > CANCELLED_STEPS
    assert logged <= resumed["step"] < CANCELLED_STEPS, (logged, resumed)
    assert resumed["resumed_from"].endswith(f"checkpoints/step_{resumed['step']:08d}"), resumed
    assert json.loads(final_state(work, CANCELLED).read_text())["step"] == CANCELLED_STEPS
    # the retry continued from there: each later step trained once
    after = [r["step"] for r in metrics(work, CANCELLED, "train") if r["step"] > resumed["step"]]
    assert after == list(range(resumed["step"] + 1, CANCELLED_STEPS + 1))


# ----------------------------------------------------------------------------- README
def test_docs_tell_users_what_these_tests_do() -> None:
    section = (ROOT / "docs" / "slurm.md").read_text()  # the README links it
    assert "docs/slurm.md" in (ROOT / "README.md").read_text()
    # the command-line override exactly as the tests pass it, with the README's placeholders
    override = " ".join(
        account_args(type("Placeholders", (), {"account": "<account>", "partition": "<partition>"}))
    )
    assert override in section, f"docs/slurm.md lacks the override the tests use: {override}"
    assert "~/.config/snakemake/slurm/config.yaml" in section
    assert "snakemake --profile slurm all" in section
    assert "ci/local_slurm.sh" in section


# ----------------------------------------------------------------------------- 3. preflight
def preflight(cluster: Any, tmp_path: Path, account: str) -> subprocess.CompletedProcess[str]:
    profile = copy.deepcopy(PROFILE)
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

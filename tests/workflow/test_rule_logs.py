"""Every rule's job sends its output to the rule's log (leviathan.study.logs) before its work,
so a failed cluster job leaves its error in the file Snakemake names; the train rule execs the
same command `leviathan config show --cell` prints (leviathan.study.launch.train_command)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from workflow_helpers import ROOT, snakemake, workflow_copy

from leviathan import layout
from leviathan.cells import Cell
from leviathan.study import rules
from leviathan.study.launch import cell_args, launcher_args, train_command

RULE_SCRIPT = ROOT / "workflow" / "scripts" / "rule.py"


def _run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_log_gets_stdout_stderr_logging_child_output_and_the_traceback(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "rule" / "job.log"
    out = _run_python(
        f"""
        import logging, subprocess, sys
        from leviathan.study.logs import send_output_to_log
        print("before the log")
        send_output_to_log({str(log)!r})
        print("from print")
        print("from stderr", file=sys.stderr)
        logging.getLogger("leviathan.test").info("from logging")
        subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
        raise RuntimeError("the job failed here")
        """,
        tmp_path,
    )
    assert out.returncode == 1
    text = log.read_text()
    for line in ("from print", "from stderr", "from logging", "from a child process"):
        assert line in text
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: the job failed here" in text
    assert "before the log" not in text  # the file is the job's own: truncated, not appended to
    assert "from print" not in out.stdout + out.stderr


@pytest.mark.parametrize("rule", ["report", "train"])
def test_rule_log_sends_every_rules_output_to_its_log(tmp_path: Path, rule: str) -> None:
    """rule_log: a job's output and its traceback go to the job's log, whether the log keeps
    every attempt (train) or only this one (every other rule)."""
    log = tmp_path / "logs" / rule / "job.log"
    out = _run_python(
        f"""
        from types import SimpleNamespace
        from leviathan.study.logs import rule_log
        rule_log(SimpleNamespace(log=[{str(log)!r}], rule={rule!r}, wildcards={{}}))
        print("from print")
        raise RuntimeError("the job failed here")
        """,
        tmp_path,
    )
    assert out.returncode == 1
    text = log.read_text()
    assert f"rule {rule} on " in text
    assert "from print" in text and "RuntimeError: the job failed here" in text
    assert "the job failed here" not in out.stdout + out.stderr


def test_the_rule_script_logs_before_the_rules_action_runs(tmp_path: Path) -> None:
    """The one rule script, run as Snakemake runs it: the report action fails on a job with no
    params, and that failure is in the job's log, after the line naming the job."""
    log = tmp_path / "logs" / "report" / "job.log"
    out = _run_python(
        f"""
        import runpy, types
        sm = types.SimpleNamespace(log=[{str(log)!r}], rule="report", wildcards={{}}, config={{}})
        runpy.run_path({str(RULE_SCRIPT)!r}, init_globals={{"snakemake": sm}})
        """,
        tmp_path,
    )
    assert out.returncode == 1
    text = log.read_text()
    assert text.index("rule report on ") < text.index("AttributeError")
    assert "'params'" in text


def test_every_rule_runs_the_one_rule_script_and_has_an_action() -> None:
    """Each rule's `script:` is workflow/scripts/rule.py, and leviathan.study.rules knows the
    rule; an unknown rule is refused in one line that names the module to extend."""
    named = 0
    for smk in sorted((ROOT / "workflow" / "scripts").parent.joinpath("rules").glob("*.smk")):
        for rule in re.split(r"^ *rule\b", smk.read_text(), flags=re.M)[1:]:
            if "script:" not in rule:
                continue
            script = re.search(r"script:\s*\n\s*\"([^\"]+)\"", rule)
            assert script and script.group(1) == "../scripts/rule.py", smk.name
            name = re.match(r" *(\w+):", rule) or re.search(r'name:\s*\n\s*f?"(\w+)', rule)
            assert name, f"{smk.name}: a rule without a name"
            assert callable(rules.action(name.group(1)))
            named += 1
    assert named >= 10
    assert [p.name for p in RULE_SCRIPT.parent.iterdir() if p.suffix == ".py"] == ["rule.py"]
    with pytest.raises(SystemExit, match="leviathan.study.rules"):
        rules.action("no_such_rule")


def test_every_rule_with_a_script_declares_a_log() -> None:
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        # a named rule, or one defined in a loop (`rule:` with its `name:` inside)
        for rule in re.split(r"^ *rule\b", smk.read_text(), flags=re.M)[1:]:
            if "script:" in rule:
                assert "    log:" in rule, f"{smk.name}: rule {rule.split(chr(10))[:2]}"


def _run_train_script(
    tmp_path: Path, config: dict, cell: Cell, tokens: str | None = None, execute: bool = False
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The train script with a stand-in `snakemake` object and, unless `execute`, os.execvp
    replaced by a recorder (of the argv it would exec, written to the returned path)."""
    tokens = tokens or layout.tokens_dir("embedded", "gpt2")
    run_dir = layout.run_dir(cell)
    params = {
        "launch": launcher_args(config, cell.scale),
        "cell": cell_args(cell, config, tokens, run_dir),
    }
    wildcards = {"scale": cell.scale, "vocab": cell.vocab, "variant": cell.variant}
    wildcards.update(seed=str(cell.seed), results=cell.results)
    log, record = tmp_path / "train.log", tmp_path / "argv.json"
    out = _run_python(
        f"""
        import json, os, runpy, types
        def execvp(file, argv):
            open({str(record)!r}, "w").write(json.dumps(argv))
        if not {execute!r}:
            os.execvp = execvp
        wildcards = types.SimpleNamespace(**{wildcards!r}, items=lambda: [("scale", "micro")])
        sm = types.SimpleNamespace(
            params=types.SimpleNamespace(**{params!r}),
            output=types.SimpleNamespace(final={layout.final_marker(cell)!r}),
            config={config!r},
            log=[{str(log)!r}],
            rule="train",
            wildcards=wildcards,
        )
        runpy.run_path({str(RULE_SCRIPT)!r}, init_globals={{"snakemake": sm}})
        """,
        tmp_path,
    )
    return out, record


def test_the_train_script_execs_the_command_config_show_prints(tmp_path: Path) -> None:
    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    config = {
        "resources": {"micro": {"gpus": 2}},
        "train": {"micro": {"lr": 1e-3, "micro_batch": 2}},
        "runtime": {"log_every": 7},
    }
    out, record = _run_train_script(tmp_path, config, cell)
    assert out.returncode == 0, out.stderr
    argv = json.loads(record.read_text())
    tokens, run_dir = layout.tokens_dir("embedded", "gpt2"), layout.run_dir(cell)
    expected = shlex.split(train_command(cell, config, tokens, run_dir, python=sys.executable))
    assert argv == expected
    assert "--runtime" in argv  # the workflow's runtime (log_every) reaches the job
    assert "micro_batch=2" in argv  # so does the memory knob, outside the rule's params
    assert "leviathan.torchrun" in argv  # two GPUs: torchrun (with a preemption's status)
    assert "rule train (scale=micro)" in (tmp_path / "train.log").read_text()


def test_a_retry_of_a_micro_batch_that_ran_out_of_memory_stops_at_once(tmp_path: Path) -> None:
    """The profile's retries resubmit a failed job whatever its exit status: the run's
    out-of-memory record makes the retry refuse in seconds, until micro_batch is lowered."""
    from leviathan.io import write_json
    from leviathan.train.errors import OUT_OF_MEMORY_EXIT, out_of_memory

    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    refusal = out_of_memory("micro", 8, 8, step=3, device="cuda:0", last_good="none")
    write_json(tmp_path / layout.out_of_memory_file(layout.run_dir(cell)), refusal.record)
    out, record = _run_train_script(tmp_path, {}, cell)  # the scale's micro_batch: 8
    assert out.returncode == OUT_OF_MEMORY_EXIT
    assert not record.exists()  # nothing was started
    text = (tmp_path / "train.log").read_text()
    assert "with train.micro.micro_batch=8" in text
    assert "recorded by an earlier attempt" in text
    lowered = {"train": {"micro": {"micro_batch": 4}}}
    out, record = _run_train_script(tmp_path, lowered, cell)
    assert out.returncode == 0, out.stderr
    assert "micro_batch=4" in json.loads(record.read_text())


@pytest.mark.slow  # a 12-step training of the micro model (~15 s)
def test_a_training_jobs_log_shows_a_progress_line_every_n_steps(
    tmp_path: Path, gpt2_shards: Path
) -> None:
    from leviathan.train.metrics_log import read_metrics

    cell = Cell("micro", "gpt2", "tied", 0, "embedded")
    config = {
        "train": {"micro": {"total_tokens": 8 * 64 * 12}},
        "runtime": {
            "log_line_every": 4,
            "log_line_s": 0,
            "validation": {"every": 0},
            "prefetch": 0,
        },
    }
    out, _ = _run_train_script(tmp_path, config, cell, str(gpt2_shards), execute=True)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "train.log").read_text()
    lines = [line for line in text.splitlines() if line.startswith("step ")]
    assert [line.split(" | ")[0] for line in lines] == [f"step {s}/12" for s in (1, 4, 8, 12)]
    metrics = read_metrics(tmp_path / layout.metrics_file(layout.run_dir(cell)), "train")
    loss = {r["step"]: r["loss"] for r in metrics}
    for line in lines:
        step = int(line.split(" ")[1].split("/")[0])
        assert f"| loss {loss[step]:.3f} |" in line
        assert " tok/s | MFU unknown | ETA " in line  # CPU: no peak known, no memory figure
    assert lines[-1].endswith("ETA 0s")


@pytest.mark.slow
def test_a_rule_log_is_written_by_a_real_run_and_holds_a_failing_jobs_error(
    tmp_path: Path,
) -> None:
    work = workflow_copy(tmp_path)
    config_path = work / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    name = config["corpus"]["name"]
    target = str(layout.corpus_file(layout.corpus_dir(name), "train"))
    log = work / layout.log_file("fetch_corpus", name)
    ok = snakemake(work, "--profile", "profiles/local", "--cores", "1", target)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    assert "rule fetch_corpus (corpus=embedded)" in log.read_text()
    # a text corpus without paths fails in the job, not before it
    config["corpus"].update(kind="text", paths=[])
    config_path.write_text(yaml.safe_dump(config))
    failed = snakemake(work, "--profile", "profiles/local", "--cores", "1", "-F", target)
    assert failed.returncode != 0
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "corpus.kind=text needs corpus.paths" in text


def test_each_attempt_of_a_train_job_is_appended_to_the_log_snakemake_names(
    tmp_path: Path,
) -> None:
    """Snakemake removes a job's log before each attempt: a train job's output goes to the end
    of the cell's history, which the log is a second name of, each attempt opened by its number;
    the number reaches the program the job execs, whose first line says where it resumed."""
    log = tmp_path / "logs" / "train" / "seed0.log"
    code = f"""
        import os, sys, types
        from leviathan.study.logs import rule_log
        sm = types.SimpleNamespace(
            log=[{str(log)!r}], rule="train", wildcards={{"seed": "0"}}
        )
        rule_log(sm)
        print("training output")
        step = sys.argv[1]
        program = "from pathlib import Path; from leviathan.study.logs import start_line; "
        program += f"print(start_line({{step}}, Path('ckpt') if {{step}} else None))"
        os.execvp(sys.executable, [sys.executable, "-c", program])
        """
    for step in (0, 4):
        if log.exists():
            log.unlink()  # as Snakemake does before a job
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), str(step)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
    text = log.read_text()
    assert text == layout.attempts_log(log).read_text()
    lines = [line for line in text.splitlines() if "attempt" in line]
    assert len(lines) == 4, text
    assert "attempt 1 of rule train (seed=0)" in lines[0]
    assert lines[1] == "attempt 1, started at step 0 (no checkpoint to resume from)"
    assert "attempt 2 of rule train (seed=0)" in lines[2]
    assert lines[3] == "attempt 2, resumed from step 4 (ckpt)"
    assert text.count("training output") == 2
    other = tmp_path / "logs" / "eval" / "seed0.log"  # other rules' logs: the job's own
    assert not layout.attempts_log(other).exists()

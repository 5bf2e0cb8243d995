"""Tables, figures, the Snakemake report and `leviathan audit` on a real micro run of the workflow."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import (
    BIN,
    audit,
    job_counts,
    small_config,
    snakemake,
    tool_env,
    workflow_copy,
)

pytestmark = pytest.mark.slow

TABLES = [
    "main",
    "downstream",
    "ablation",
    "vocabulary",
    "frequency",
    "sample_efficiency",
    "cost",
    "throughput",
    "paper_vs_ours",
    "metrics",
]
FIGURES = ["loss_curves", "frequency", "vocabulary", "ablation", "training", "lev_health"]
LEV = "results/runs/embedded/micro/gpt2/leviathan/seed0"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = workflow_copy(tmp_path_factory.mktemp("report"))
    config = small_config(work)
    main = config["studies"]["main"]
    config["studies"] = {
        "main": main,
        "ablation": {**main, "variants": ["tied", "untied", "leviathan"]},
        "vocabulary": dict(main),
    }
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    out = snakemake(work, "--profile", "profiles/local", "all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


def test_every_table_in_three_formats_from_the_evaluations(work: Path) -> None:
    tables = work / "results/report/embedded/tables"
    for name in TABLES:
        for fmt in ("csv", "md", "tex"):
            assert (tables / f"{name}.{fmt}").stat().st_size > 0
            assert (tables / f"{name}.{fmt}.json").is_file()
    main = pd.read_csv(tables / "main.csv").set_index("row")
    val = json.loads(
        (work / "results/eval/embedded/micro/gpt2/leviathan/seed0/val.json").read_text()
    )
    assert main.loc["micro/gpt2/leviathan", "val_loss"] == val["results"]["overall"]["loss"]
    manifest = json.loads((tables / "main.csv.json").read_text())
    cell = next(
        c
        for c in manifest["cells"]
        if (c["row"], c["column"]) == ("micro/gpt2/leviathan", "val_ppl_gain")
    )
    assert cell["op"] == "exp_gain"
    assert {s["group"] for s in cell["sources"]} == {"a", "b"}
    # the cost table's counter agrees with the parameter count the trainer logged at start
    cost = pd.read_csv(tables / "cost.csv").set_index("row")
    start = json.loads((work / LEV / "metrics.jsonl").read_text().splitlines()[0])
    assert cost.loc["micro/gpt2/leviathan", "params"] == start["params"]
    # the throughput table: the CPU run's own records, labelled as predicted for nothing
    pace = pd.read_csv(tables / "throughput.csv").set_index("row").loc["micro/gpt2/leviathan/seed0"]
    assert (pace["device"], pace["plan_device"]) == ("cpu", "cpu")
    assert pace["prediction"].startswith("none: ") and pd.isna(pace["predicted_step_s"])
    assert pace["tokens_per_s"] > 0 and pace["step_s"] > 0
    # what the numbers rest on: the run's own token count, below the smoke-test size
    state = json.loads((work / LEV / "checkpoints/final/state.json").read_text())
    assert main.loc["micro/gpt2/leviathan", "train_tokens"] == f"{state['tokens']:,}"
    assert main.loc["micro/gpt2/leviathan", "evidence"] == "smoke test"
    assert "\\begin{tabular}" in (tables / "ablation.tex").read_text()
    paper = pd.read_csv(tables / "paper_vs_ours.csv")
    assert paper["paper"].notna().all()
    assert paper["ours"].isna().all()  # no paper scale trained here
    check = (tables / "paper_check.md").read_text()
    assert "3 of 16 reported figures do not follow" in check
    assert "exp(val loss 2.402)" in check


def test_figures_png_and_pdf(work: Path) -> None:
    for name in FIGURES:
        png = (work / f"results/report/embedded/figures/{name}.png").read_bytes()
        pdf = (work / f"results/report/embedded/figures/{name}.pdf").read_bytes()
        assert png.startswith(b"\x89PNG")
        assert pdf.startswith(b"%PDF")
        assert len(png) > 10_000
    # no evaluation along training and no study named recon here: neither figure (no report
    # ships an empty panel)
    for absent in ("along", "recon"):
        assert not list((work / "results/report/embedded/figures").glob(f"{absent}.*"))


def test_the_html_report_opens_with_the_study_status(work: Path) -> None:
    """`leviathan report html` (what `make run` ends with): Snakemake's own report, whose first
    page includes the status the report rule wrote, counted from this run."""
    out = subprocess.run(
        [str(BIN / "leviathan"), "report", "html"],
        cwd=work,
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    html = (work / "results/report/embedded/report.html").read_text()
    status = (work / "results/report/embedded/status.rst").read_text()
    trained = len(list((work / "results/runs").rglob("final/state.json")))
    assert f"{trained} cells of study ``embedded``" in status
    assert "no number of the paper is reproduced by this run" in status
    assert "no cell trained on a GPU" in status
    # the first page's text (docutils' rendering, inside Snakemake's page) and the results
    assert "Study status" in html and "no number of the paper is reproduced by this run" in html
    assert f"{trained} cells of study" in html
    assert "loss_curves.png" in html and "main.csv" in html
    # a table's caption: its description in the code, written with the table
    assert "Main results: validation loss" in html


def test_audit_passes_on_the_clean_run(work: Path) -> None:
    out = audit(work, "results/report/embedded/tables/main.csv", "--all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "audit passed" in out.stdout
    one = audit(
        work, "results/report/embedded/tables/main.tex", "--cell", "micro/gpt2/leviathan,val_loss"
    )
    assert one.returncode == 0, one.stdout + one.stderr
    for link in (
        f"{LEV}/checkpoints/final/model.safetensors",
        "data/tokens/embedded/gpt2/train.bin",
        "data/corpus/embedded/train.jsonl.zst",
        "vocabulary gpt2",
    ):
        assert link in one.stdout, link


def _tampered(work: Path, path: str, tamper) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    target = work / path
    backup = target.with_name(target.name + ".bak")
    shutil.copy2(target, backup)
    try:
        tamper(target)
        return audit(work, "results/report/embedded/tables/main.csv", "--all")
    finally:
        backup.replace(target)


def test_audit_names_a_tampered_shard_checkpoint_and_table(work: Path) -> None:
    def flip_byte(p: Path) -> None:
        data = bytearray(p.read_bytes())
        data[100] ^= 0xFF
        p.write_bytes(bytes(data))

    shard = "data/tokens/embedded/gpt2/train.bin"
    out = _tampered(work, shard, flip_byte)
    assert out.returncode == 1
    assert f"{shard}: sha256" in out.stderr

    weights = f"{LEV}/checkpoints/final/model.safetensors"
    tied = work / "results/runs/embedded/micro/gpt2/tied/seed0/checkpoints/final/model.safetensors"
    out = _tampered(work, weights, lambda p: shutil.copy(tied, p))
    assert out.returncode == 1
    assert f"{weights}: sha256" in out.stderr

    table = "results/report/embedded/tables/main.csv"

    def edit_value(p: Path) -> None:
        frame = pd.read_csv(p)
        frame.loc[frame["row"] == "micro/gpt2/leviathan", "val_loss"] -= 0.5
        frame.to_csv(p, index=False, float_format="%.17g")

    out = _tampered(work, table, edit_value)
    assert out.returncode == 1
    assert f"{table}: sha256" in out.stderr
    assert "main.csv [micro/gpt2/leviathan, val_loss]" in out.stderr
    assert "was edited" in out.stderr

    # the checkpoint's manifest rewritten to name other training data: the evaluation recorded its hash
    manifest = f"{weights}.json"

    def other_data(p: Path) -> None:
        doc = json.loads(p.read_text())
        doc["inputs"][0]["path"] = "data/tokens/embedded/gpt2/val.bin"
        p.write_text(json.dumps(doc))

    out = _tampered(work, manifest, other_data)
    assert out.returncode == 1
    assert f"{manifest}: sha256" in out.stderr
    assert audit(work, table, "--all").returncode == 0  # restored: clean again


def test_train_jobs_rerun_after_a_touched_shard_train_nothing_and_the_audit_stays_green(
    work: Path, tmp_path: Path
) -> None:
    """Snakemake reruns every train job of a finished study whose shard was touched (deleting
    each final's state.json first): each ends at once, its checkpoint byte for byte as it was, so
    the evaluations built on it still pass the audit, and a real tamper still fails it."""
    copy = shutil.copytree(work, tmp_path / "rerun", symlinks=True)
    markers = sorted(copy.glob("results/runs/embedded/*/*/*/*/checkpoints/final/state.json"))
    finals = {p: _bytes(p.parent) for p in markers}
    logs = {p: (p.parents[2] / "metrics.jsonl").read_bytes() for p in markers}
    (copy / "data/tokens/embedded/gpt2/train.bin").touch()  # newer than every checkpoint
    targets = [str(p.relative_to(copy)) for p in markers]
    out = snakemake(copy, "--profile", "profiles/local", *targets)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert job_counts(out.stdout + out.stderr) == {"train": len(markers)}
    for marker in markers:
        assert _bytes(marker.parent) == finals[marker]  # state.json back, nothing rewritten
        assert (marker.parents[2] / "metrics.jsonl").read_bytes() == logs[marker]
    train_logs = sorted(  # each job's log, not its history (a second name of the same file)
        p for p in (copy / "logs/train").rglob("*.log") if not p.name.endswith(".attempts.log")
    )
    assert len(train_logs) == len(markers)
    for log in train_logs:
        assert "nothing to train" in log.read_text(), log
    table = "results/report/embedded/tables/main.csv"
    out = audit(copy, table, "--all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    val = "results/eval/embedded/micro/gpt2/leviathan/seed0/val.json"

    def edit_loss(p: Path) -> None:
        doc = json.loads(p.read_text())
        doc["results"]["overall"]["loss"] -= 0.5
        p.write_text(json.dumps(doc))

    out = _tampered(copy, val, edit_loss)
    assert out.returncode == 1 and f"{val}: sha256" in out.stderr
    weights = f"{LEV}/checkpoints/final/model.safetensors"
    tied = copy / "results/runs/embedded/micro/gpt2/tied/seed0/checkpoints/final/model.safetensors"
    out = _tampered(copy, weights, lambda p: shutil.copy(tied, p))
    assert out.returncode == 1 and f"{weights}: sha256" in out.stderr
    assert "older than its checkpoint" not in out.stderr

    def written_again(p: Path) -> None:  # as a resumed rerun rewrites it: the weights the same
        doc = json.loads(p.read_text())
        doc["resumed_from"] = {"path": f"{LEV}/checkpoints/step_00000003", "step": 3}
        p.write_text(json.dumps(doc))

    out = _tampered(copy, f"{weights}.json", written_again)
    assert out.returncode == 1
    older = [line for line in out.stderr.splitlines() if "older than its checkpoint" in line]
    assert older and all("resumed from" in line and "--force" in line for line in older), older


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_an_evaluation_copied_into_another_cell_is_refused_and_fails_the_audit(work: Path) -> None:
    lev = work / "results/eval/embedded/micro/gpt2/leviathan/seed0/val.json"
    tied = work / "results/eval/embedded/micro/gpt2/tied/seed0/val.json"
    backup = {p: p.read_bytes() for p in (lev, Path(f"{lev}.json"))}
    shutil.copy(tied, lev)

    def rebuilt() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "leviathan"), "report", "tables", "--no-figures"],
            cwd=work,
            capture_output=True,
            text=True,
            env=tool_env(),
            timeout=300,
        )

    try:
        out = rebuilt()  # not the file its manifest records: refused in one line
        assert out.returncode == 2
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "leviathan/seed0/val.json: sha256" in out.stderr
        shutil.copy(f"{tied}.json", f"{lev}.json")  # its manifest copied too: of another cell
        out = rebuilt()
        assert out.returncode == 2
        assert "evaluates the checkpoint of cell micro/gpt2/tied/seed0" in out.stderr
        assert "fills the row of micro/gpt2/leviathan/seed0" in out.stderr
        out = audit(
            work,
            "results/report/embedded/tables/main.csv",
            "--cell",
            "micro/gpt2/leviathan,val_loss",
        )
        assert out.returncode == 1
        assert "leviathan/seed0/val.json: sha256" in out.stderr
    finally:
        for p, data in backup.items():
            p.write_bytes(data)
        subprocess.run(
            [str(BIN / "leviathan"), "report", "tables", "--no-figures"],
            cwd=work,
            env=tool_env(),
            capture_output=True,
            timeout=300,
            check=True,
        )


def _val_records_edited(log: Path, delta: float) -> None:
    """The first validation record of a metrics log with its val_loss moved by `delta`."""
    lines = log.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if json.loads(line).get("kind") == "val")
    rec = json.loads(lines[i])
    rec["val_loss"] += delta
    lines[i] = json.dumps(rec, sort_keys=True)
    log.write_text("".join(line + "\n" for line in lines))


def test_edited_evaluations_and_logs_are_refused_and_fail_the_audit(
    work: Path, tmp_path: Path
) -> None:
    """An edited evaluation output or metrics log: `snakemake all` refuses to build on it, naming
    the file, and `leviathan audit` fails on it (each on a copy of the run)."""
    main = "results/report/embedded/tables/main.csv"
    val = "results/eval/embedded/micro/gpt2/leviathan/seed0/val.json"
    copy = shutil.copytree(work, tmp_path / "val", symlinks=True)
    doc = json.loads((copy / val).read_text())
    doc["results"]["overall"]["loss"] -= 0.5
    (copy / val).write_text(json.dumps(doc))
    rebuilt = snakemake(copy, "--profile", "profiles/local", "all")
    assert rebuilt.returncode != 0  # the report reran on the edit, and refused it
    assert f"{val}: sha256" in (copy / "logs/report/embedded.log").read_text()
    out = audit(copy, val)
    assert out.returncode == 1
    assert f"{val}: sha256" in out.stderr and "recorded in its manifest" in out.stderr
    assert "overall.loss is" in out.stderr  # what it says of itself
    # the failed report job's outputs were removed: no table shows the edited number
    assert not (copy / main).exists()
    assert audit(copy, main, "--all").returncode != 0

    se = "results/report/embedded/tables/sample_efficiency.csv"
    log = f"{LEV}/metrics.jsonl"
    copy = shutil.copytree(work, tmp_path / "log", symlinks=True)
    _val_records_edited(copy / log, -0.5)
    out = audit(copy, se, "--all")  # nothing reran (the log is no rule's input): still caught
    assert out.returncode == 1
    assert f"{log}: sha256" in out.stderr  # not the log sample efficiency read
    assert f"{log} up to step" in out.stderr  # nor the one the final checkpoint recorded
    assert "they were edited" in out.stderr
    rerun = snakemake(copy, "--profile", "profiles/local", "all", "--forcerun", "sample_efficiency")
    assert rerun.returncode != 0
    logs = " ".join(p.read_text() for p in (copy / "logs/eval").rglob("sample_efficiency*.log"))
    assert f"{log}: sha256" in logs
    assert audit(copy, se, "--all").returncode == 1

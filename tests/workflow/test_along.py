"""Evaluation along training (evaluate.along with runtime.checkpoint.keep_at) on the default micro run: the
val evaluation of every kept checkpoint through the real DAG, the `along` figure, the
sample-efficiency table from these evaluations, and the last point equal to the final
evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import ROOT, audit, snakemake, workflow_copy

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.run import along_enabled
from leviathan.study.along import along_points

KEEP_AT = "log2:2:20"  # 0, 1, 2, 20, 40: the final step (40) among them
STEPS = [0, 1, 2, 20, 40]
EVAL = Path("results/eval/embedded/micro/gpt2")


def _config() -> dict:
    """The default config, its main study only (micro, gpt2, tied + leviathan), along on: 2
    trainings, 12 val evaluations, the report (6.8 min on 2 shared, busy CPU cores)."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["studies"] = {"main": config["studies"]["main"]}
    config["runtime"]["checkpoint"]["keep_at"] = KEEP_AT
    config["evaluate"].update(along=True, wikitext=None, lm_eval=None)
    # a stated sample of the validation split, for eval_val and the kept checkpoints alike
    config["evaluate"]["val"]["max_windows"] = 8
    return config


def test_the_curve_ends_with_the_final_evaluation_where_the_final_step_is_not_kept() -> None:
    config = _config()
    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    config["runtime"]["checkpoint"]["keep_at"] = "log2:16"  # 0 ... 16 of 40 steps
    assert along_points(config, cell) == [
        *(layout.along_output(cell, s) for s in (0, 1, 2, 4, 8, 16)),
        layout.eval_output(cell, "val"),
    ]
    config["runtime"]["checkpoint"]["keep_at"] = KEEP_AT
    assert along_points(config, cell) == [layout.along_output(cell, s) for s in STEPS]
    config["runtime"]["checkpoint"]["keep_at"] = ""
    with pytest.raises(ValueError, match="needs runtime.checkpoint.keep_at"):
        along_enabled(config)
    config["evaluate"]["along"] = False
    assert not along_enabled(config)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = workflow_copy(tmp_path_factory.mktemp("along"))
    (work / "config/config.yaml").write_text(yaml.safe_dump(_config()))
    out = snakemake(work, "--profile", "profiles/local", "all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


def _interpolated(tokens: list[int], losses: list[float], target: float) -> float | None:
    """Linear interpolation in tokens to the first point at or below `target`."""
    for i in range(len(tokens)):
        if losses[i] <= target:
            if i == 0:
                return float(tokens[0])
            t0, t1, l0, l1 = tokens[i - 1], tokens[i], losses[i - 1], losses[i]
            return t0 + (t1 - t0) * (l0 - target) / (l0 - l1)
    return None


@pytest.mark.slow
def test_along_training_evaluations_figure_and_table(work: Path) -> None:
    doc = json.loads((work / EVAL / "along_seed0.json").read_text())
    cells = {"tied": doc["results"]["baseline"]}
    cells.update({r["variant"]: r for r in doc["results"]["runs"]})
    assert set(cells) == {"tied", "leviathan"}
    for variant, rec in cells.items():
        points = rec["points"]
        assert [p["step"] for p in points] == STEPS
        assert points[0]["tokens"] == 0 and points[-1]["tokens"] == 40 * 8 * 64
        for p in points:
            own = json.loads((work / p["path"]).read_text())
            assert own["checkpoint"]["path"].endswith(f"kept/step_{p['step']:08d}")
        # the last point (kept step 40) is the final checkpoint's evaluation, evaluated apart
        final = json.loads((work / EVAL / variant / "seed0/val.json").read_text())["results"]
        last = json.loads((work / points[-1]["path"]).read_text())["results"]
        assert last["overall"]["loss"] == pytest.approx(final["overall"]["loss"], abs=1e-9)
        for key in ("frequency_tokens", "frequency_words"):
            assert [b["mean_loss"] for b in last[key]["log10"]] == pytest.approx(
                [b["mean_loss"] for b in final[key]["log10"]], abs=1e-9
            )
        # training moves the loss away from the initial weights'
        assert points[-1]["val_loss"] < points[0]["val_loss"]
    for fmt, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF")):
        figure = work / f"results/report/embedded/figures/along.{fmt}"
        assert figure.read_bytes().startswith(magic)
        manifest = json.loads(Path(f"{figure}.json").read_text())
        assert any(i["path"].endswith("along_seed0.json") for i in manifest["inputs"])
    # the table, recomputed here from the evaluations' losses
    table = pd.read_csv(work / "results/report/embedded/tables/sample_efficiency_along.csv")
    row = table.set_index("row").loc["micro/gpt2/leviathan"]
    tied, lev = cells["tied"]["points"], cells["leviathan"]["points"]
    target = tied[-1]["val_loss"]
    assert row["target_val_loss"] == pytest.approx(target, rel=1e-12)
    assert row["final_val_loss"] == pytest.approx(lev[-1]["val_loss"], rel=1e-12)
    expected = _interpolated([p["tokens"] for p in lev], [p["val_loss"] for p in lev], target)
    if expected is None:
        assert pd.isna(row["tokens_to_target"]) and row["reached"] == 0
    else:
        assert row["tokens_to_target"] == pytest.approx(expected, rel=1e-9)
        assert row["tokens_ratio"] == pytest.approx(tied[-1]["tokens"] / expected, rel=1e-9)
    assert row["evidence"] == "smoke test"
    out = audit(work, "results/report/embedded/tables/sample_efficiency_along.csv", "--all")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

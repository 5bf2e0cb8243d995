"""Several seeds: the tables give mean +- 95% CI (Student t) and paired CIs of the gains over
tied, checked against scipy on three real micro seeds (studies.main.seeds_by_scale, as the
paper's study trains its 200m cells); the audit re-checks those numbers too."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scipy import stats
from workflow_helpers import ROOT, audit

from leviathan import layout
from leviathan.cells import Cell
from leviathan.io import read_json
from leviathan.report.build import write_report
from leviathan.study.actions import evaluate
from leviathan.study.config import resolve
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.trainer import train

pytestmark = pytest.mark.slow
SEEDS = [0, 1, 2]
STEPS = 4


@pytest.fixture(scope="module")
def seeded(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("seeds")
    shutil.copytree(ROOT / "config", work / "config")
    shards = work / "data/tokens/embedded/gpt2"
    shutil.copytree(gpt2_shards, shards)
    config = {
        "studies": {
            "main": {
                "scales": ["micro"],
                "vocabs": ["gpt2"],
                "variants": ["tied", "leviathan"],
                # as config/paper.yaml writes its 200m seeds: one seed, more at one scale
                "seeds": [0],
                "seeds_by_scale": {"micro": SEEDS},
            }
        },
        "evaluate": {
            "val": {"batch_size": 16, "max_windows": 8},
            "wikitext": None,
            "lm_eval": None,
        },
    }
    quiet = RuntimeConfig(
        progress=False,
        threads=2,
        validation=ValidationConfig(every=0),
        checkpoint=CheckpointConfig(every=0),
    )
    for variant in ("tied", "leviathan"):
        for seed in SEEDS:
            cell = Cell("micro", "gpt2", variant, seed, "embedded")
            cfg = train_config("micro", "gpt2", variant, seed=seed, total_tokens=8 * 64 * STEPS)
            train(
                cfg,
                train_bins=[shards / "train.bin"],
                val_bin=None,
                run_dir=work / layout.run_dir(cell),
                runtime=quiet,
            )
            evaluate(
                "val",
                work / layout.run_dir(cell),
                work / layout.eval_output(cell, "val"),
                config,
                val=str(shards / "val.bin"),
                counts=str(shards / "counts.npy"),
            )
    (work / "workflow/schemas").mkdir(parents=True)
    shutil.copy(ROOT / "workflow/schemas/config.schema.yaml", work / "workflow/schemas")
    (work / "study.yaml").write_text(yaml.safe_dump(config))
    resolved = resolve([work / "study.yaml"], root=work)
    cwd = Path.cwd()
    try:
        os.chdir(work)
        write_report(resolved, layout.tables_dir("embedded"), None)
    finally:
        os.chdir(cwd)
    return work


def _losses(work: Path, variant: str) -> list[float]:
    return [
        read_json(work / layout.eval_output(Cell("micro", "gpt2", variant, s, "embedded"), "val"))[
            "results"
        ]["overall"]["loss"]
        for s in SEEDS
    ]


def _half_width(values: list[float]) -> float:
    lo, hi = stats.t.interval(
        0.95, len(values) - 1, loc=sum(values) / len(values), scale=stats.sem(values)
    )
    return (hi - lo) / 2


def test_main_table_gives_means_with_student_t_intervals(seeded: Path) -> None:
    main = pd.read_csv(seeded / "results/report/embedded/tables/main.csv").set_index("row")
    tied, lev = _losses(seeded, "tied"), _losses(seeded, "leviathan")
    assert len(set(lev)) == 3  # three real, different runs
    row = main.loc["micro/gpt2/leviathan"]
    assert row["seeds"] == 3
    assert math.isclose(row["val_loss"], sum(lev) / 3, rel_tol=1e-12)
    assert math.isclose(row["val_loss_ci95"], _half_width(lev), rel_tol=1e-9)
    # paired by seed (same seed = same data order): the per-seed perplexity gains
    paired = [1 - math.exp(b) / math.exp(a) for a, b in zip(tied, lev, strict=True)]
    assert math.isclose(row["val_ppl_gain_ci95"], _half_width(paired), rel_tol=1e-9)
    assert math.isclose(stats.t.ppf(0.975, 2), 4.302652729749464, rel_tol=1e-9)  # the textbook t(2)
    md = (seeded / "results/report/embedded/tables/main.md").read_text()
    assert "val_loss_ci95" in md
    assert "±" in md


def test_audit_covers_the_intervals(seeded: Path) -> None:
    out = audit(seeded, "results/report/embedded/tables/main.csv", "--all", "-q")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    manifest = read_json(seeded / "results/report/embedded/tables/main.csv.json")
    ops = {c["op"] for c in manifest["cells"] if c["column"].endswith("_ci95")}
    assert ops == {"mean_ci95", "exp_gain_ci95"}
    # an edited interval is caught
    csv = seeded / "results/report/embedded/tables/main.csv"
    frame = pd.read_csv(csv, dtype={"row": str, "stand_in_data": str})
    frame.loc[frame["row"] == "micro/gpt2/leviathan", "val_loss_ci95"] *= 2
    frame.to_csv(csv, index=False, float_format="%.17g")
    bad = audit(seeded, str(csv), "--cell", "micro/gpt2/leviathan,val_loss_ci95")
    assert bad.returncode == 1

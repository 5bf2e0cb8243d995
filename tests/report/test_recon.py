"""The sensitivity study of LEV's reconstruction choices (config/recon.yaml): the `recon` table's
values against a re-computation here (scipy's t interval), its renderings and labels, and its
figure's points and error bars, on written cells of two seeds; and the study itself trained,
evaluated, reported and audited by the Snakemake DAG (shrunk to a few steps)."""

from __future__ import annotations

import copy
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from report_cells import write_cell
from scipy import stats
from workflow_helpers import ROOT, audit, snakemake, workflow_copy

from leviathan.cells import Cell
from leviathan.model import build_model, model_config
from leviathan.model.config import LEVConfig
from leviathan.report import drawing, lev_figures
from leviathan.report.build import report_inputs, write_report
from leviathan.report.evidence import SmokePolicy
from leviathan.report.registry import table_names
from leviathan.study.config import check_config

SMOKE_TOKENS = 30_720
# the named variants of config/recon.yaml: name -> its LEV overrides
RECON = yaml.safe_load((ROOT / "config" / "recon.yaml").read_text())
NAMED = {name: spec["model"]["lev"] for name, spec in RECON["variants"].items()}
VARIANTS = ["tied", "leviathan", *NAMED]
# each cell's validation loss, by (variant, seed)
LOSSES = {
    ("tied", 0): 3.10,
    ("tied", 1): 3.16,
    ("leviathan", 0): 3.00,
    ("leviathan", 1): 3.07,
    ("lev_no_seed_bias", 0): 2.98,
    ("lev_no_seed_bias", 1): 3.09,
    ("lev_normalised", 0): 3.03,
    ("lev_normalised", 1): 3.05,
    ("lev_learned_knots", 0): 3.01,
    ("lev_learned_knots", 1): 3.02,
}


def _config(studies: dict[str, Any]) -> dict[str, Any]:
    return {
        "studies": studies,
        "evaluate": {"val": {}},
        "corpus": {"name": "embedded"},
        "variants": copy.deepcopy(RECON["variants"]),
    }


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The recon study's cells at micro, two seeds, written as a run leaves them."""
    monkeypatch.chdir(tmp_path)
    for (variant, seed), loss in LOSSES.items():
        cell = Cell("micro", "gpt2", variant, seed, "embedded")
        base = "leviathan" if variant in NAMED else variant
        write_cell(cell, tokens=SMOKE_TOKENS, loss=loss, base=base, lev=NAMED.get(variant))
    study = {"scales": ["micro"], "vocabs": ["gpt2"], "variants": VARIANTS, "seeds": [0, 1]}
    return _config({"recon": study})


def test_the_recon_config_is_each_single_change_of_the_defaults() -> None:
    check_config(copy.deepcopy(RECON))
    defaults = {f.name: f.default for f in fields(LEVConfig)}
    changed = {key for lev in NAMED.values() for key in lev}
    assert changed == {"seed_bias", "basis", "knot_scale"}
    for lev in NAMED.values():  # one key each, set away from its default
        ((key, value),) = lev.items()
        assert value != defaults[key]
    (study,) = RECON["studies"].values()
    assert {"tied", "leviathan"} <= set(study["variants"]) and len(study["seeds"]) >= 2
    assert RECON["study_name"] == "recon"


def test_the_table_appears_with_a_study_named_recon_only(written: dict[str, Any]) -> None:
    assert "recon" in table_names(report_inputs(written))
    other = _config({"main": written["studies"]["recon"]})
    assert "recon" not in table_names(report_inputs(other))


def _half_width(values: list[float]) -> float:
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    return (hi - lo) / 2


def test_recon_table_values_differences_and_cis(written: dict[str, Any]) -> None:
    write_report(written, "tables", None, metrics_dir="metrics")
    frame = pd.read_csv("tables/recon.csv", keep_default_na=False, na_values=[""])
    frame = frame.set_index("row")
    assert list(frame.index) == [f"micro/gpt2/{v}" for v in ("tied", "leviathan", *sorted(NAMED))]
    for variant in VARIANTS:
        row = frame.loc[f"micro/gpt2/{variant}"]
        losses = [LOSSES[variant, s] for s in (0, 1)]
        assert row["val_loss"] == pytest.approx(np.mean(losses))
        assert row["val_loss_ci95"] == pytest.approx(_half_width(losses))
        for col, ref in (("diff_vs_leviathan", "leviathan"), ("diff_vs_tied", "tied")):
            if variant == ref:
                assert math.isnan(row[col]) and math.isnan(row[col + "_ci95"])
                continue
            diffs = [LOSSES[variant, s] - LOSSES[ref, s] for s in (0, 1)]  # paired by seed
            assert row[col] == pytest.approx(np.mean(diffs))
            assert row[col + "_ci95"] == pytest.approx(_half_width(diffs))
        assert (row["evidence"], row["train_tokens"], row["seeds"]) == (
            "smoke test",
            f"{SMOKE_TOKENS:,}",
            2,
        )
        # the parameter count, the model's own tensors counted (seed bias off: h d_seed fewer)
        base = "leviathan" if variant in NAMED else variant
        cfg = model_config("micro", "gpt2", base, overrides={"lev": dict(NAMED.get(variant, {}))})
        assert row["params"] == sum(p.numel() for p in build_model(cfg).parameters())
    recipes = dict(zip(frame["variant"], frame["recipe"].fillna(""), strict=True))
    assert recipes == {
        "tied": "",
        "leviathan": "",
        "lev_no_seed_bias": "lev.seed_bias=False",
        "lev_normalised": "lev.basis=normalised",
        "lev_learned_knots": "lev.knot_scale=learned",
    }
    md = Path("tables/recon.md").read_text()
    assert "SMOKE TEST" in md and "Does the result depend on the reconstruction?" in md
    d = frame.loc["micro/gpt2/lev_normalised"]
    assert f"{d['diff_vs_leviathan']:+.4f}" in md and f"±{d['diff_vs_leviathan_ci95']:.4f}" in md
    assert "SMOKE TEST" in Path("tables/recon.tex").read_text()


def test_one_seed_has_no_ci_columns(written: dict[str, Any]) -> None:
    written["studies"]["recon"]["seeds"] = [0]
    write_report(written, "tables", None, metrics_dir="metrics")
    frame = pd.read_csv("tables/recon.csv").set_index("row")
    assert not [c for c in frame.columns if c.endswith("_ci95")]
    row = frame.loc["micro/gpt2/lev_normalised"]
    assert row["diff_vs_tied"] == pytest.approx(LOSSES["lev_normalised", 0] - LOSSES["tied", 0])


def _drawn(monkeypatch: pytest.MonkeyPatch, csv: Path | None) -> Any:
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(
        drawing, "save_figure", lambda fig, out, name, inputs: drawn.update({name: fig})
    )
    lev_figures.recon(csv, "figures", SmokePolicy.default())
    return drawn["recon"]


def test_recon_figure_draws_each_variants_loss_and_difference_with_its_ci(
    written: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_report(written, "tables", None, metrics_dir="metrics")
    frame = pd.read_csv("tables/recon.csv").set_index("variant")
    fig = _drawn(monkeypatch, Path("tables/recon.csv"))
    assert "SMOKE TEST" in fig._suptitle.get_text()
    left, right = fig.axes
    ticks = [t.get_text() for t in left.get_xticklabels()]
    assert ticks == list(frame.index) and len(left.containers) == len(ticks)
    for i, container in enumerate(left.containers):  # a point and its error bar per variant
        (bar,) = container.lines[2]
        (_, y0), (_, y1) = bar.get_segments()[0]
        loss, ci = frame.loc[ticks[i], ["val_loss", "val_loss_ci95"]]
        assert (y0, y1) == pytest.approx((loss - ci, loss + ci))
    labels = [t.get_text().split("\n") for t in right.get_xticklabels()]
    changed = [label[0] for label in labels]
    assert changed == [v for v in frame.index if v != "leviathan"]
    # each choice's tick names its change (the recipe); tied's, the default recipe, none
    assert {label[0]: label[1:] for label in labels} == {
        "tied": [],
        "lev_learned_knots": ["lev.knot_scale=learned"],
        "lev_no_seed_bias": ["lev.seed_bias=False"],
        "lev_normalised": ["lev.basis=normalised"],
    }
    assert len(right.containers) == len(changed)
    for i, container in enumerate(right.containers):
        (_, y0), (_, y1) = container.lines[2][0].get_segments()[0]
        diff, ci = frame.loc[changed[i], ["diff_vs_leviathan", "diff_vs_leviathan_ci95"]]
        assert (y0, y1) == pytest.approx((diff - ci, diff + ci))
    assert "micro / gpt2" in left.get_title() and "smoke test" in left.get_title()


def test_recon_figure_without_the_study_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fig = _drawn(monkeypatch, None)
    assert any("no study named `recon`" in t.get_text() for t in fig.axes[0].texts)


# ---------------------------------------------------------------- the real DAG


def _study(work: Path) -> Path:
    """config/recon.yaml as shipped, shrunk: one seed, 3 steps a cell, a small validation."""
    config = copy.deepcopy(RECON)
    (study,) = config["studies"].values()
    study["seeds"] = [0]
    config["train"] = {"micro": {"total_tokens": 8 * 64 * 3}}
    config["runtime"].update({"validation": {"every": 1, "windows": 2}, "checkpoint": {"every": 0}})
    config["evaluate"]["val"]["max_windows"] = 8
    path = work / "config" / "recon_small.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.slow
def test_the_recon_study_runs_and_its_table_and_figures_pass_the_audit(tmp_path: Path) -> None:
    """config/recon.yaml's five cells, 3 steps each, through the DAG (corpus, tokenize, 5 x
    train and eval_val, sample efficiency, report), then `leviathan audit` of the recon table:
    334 s measured on 2 shared cores while another two-job study ran on them (load 5-8)."""
    work = workflow_copy(tmp_path)
    configfile = _study(work)
    out = snakemake(
        work, "all", "--profile", "profiles/local", "--cores", "2", "--configfile", str(configfile)
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = work / "results/report/recon"
    frame = pd.read_csv(report / "tables/recon.csv").set_index("variant")
    assert list(frame.index) == ["tied", "leviathan", *sorted(NAMED)]
    assert set(frame["evidence"]) == {"smoke test"}
    assert frame.loc["lev_normalised", "recipe"] == "lev.basis=normalised"
    assert frame.loc["lev_learned_knots", "diff_vs_leviathan"] == pytest.approx(
        frame.loc["lev_learned_knots", "val_loss"] - frame.loc["leviathan", "val_loss"]
    )
    for name in ("recon", "lev_health"):
        assert (report / f"figures/{name}.png").read_bytes().startswith(b"\x89PNG")
        assert (report / f"figures/{name}.pdf").stat().st_size > 0
    checked = audit(work, str(report / "tables/recon.md"))
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]

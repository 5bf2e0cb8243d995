"""A run below report.smoke_test.below_tokens is labelled a smoke test wherever its numbers appear
(tables in every format, figures, paper_vs_ours, DVC metrics), and the paper's reported numbers
sit beside ours only at the same scale."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from report_cells import write_cell, write_sample_efficiency
from workflow_helpers import BIN

from leviathan import layout
from leviathan.cells import Cell
from leviathan.report import drawing, figures
from leviathan.report.build import write_report
from leviathan.report.evidence import SmokePolicy

SMOKE_TOKENS = 20_480  # the default config's micro runs: 40 steps of 8 x 64 tokens
STUDY = {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied", "leviathan"], "seeds": [0]}
STUDIES = {"main": STUDY, "ablation": STUDY, "vocabulary": STUDY, "recon": STUDY}


def _config(below_tokens: int | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "studies": STUDIES,
        "evaluate": {"val": {}},
        "corpus": {"name": "embedded"},
    }
    if below_tokens is not None:
        reason = "a stated reason"
        config["report"] = {"smoke_test": {"below_tokens": below_tokens, "reason": reason}}
    return config


@pytest.fixture
def micro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for variant in ("tied", "leviathan"):
        write_cell(Cell("micro", "gpt2", variant, 0, "embedded"), tokens=SMOKE_TOKENS)
    write_sample_efficiency("micro", "gpt2")
    return tmp_path


def test_every_table_labels_a_small_run_a_smoke_test(micro: Path) -> None:
    write_report(_config(), "tables", None, metrics_dir="metrics")
    policy = SmokePolicy.default()
    assert policy.below_tokens > SMOKE_TOKENS
    assert policy.reason  # the schema's default, stated
    names = ["main", "ablation", "vocabulary", "recon", "frequency", "sample_efficiency"]
    names += ["metrics"]
    for name in names:
        frame = pd.read_csv(f"tables/{name}.csv")
        ours = frame[frame["source"] == "ours"] if "source" in frame else frame
        assert set(ours["evidence"]) == {"smoke test"}, name
        assert set(ours["train_tokens"]) == {f"{SMOKE_TOKENS:,}"}, name
        md, tex = (Path(f"tables/{name}.{fmt}").read_text() for fmt in ("md", "tex"))
        assert "SMOKE TEST" in md, name
        assert policy.reason.split()[0] in md, name
        assert "SMOKE TEST" in tex, name
    # the vocabulary range of the paper (scale not stated) is its own row, not beside ours
    vocab = pd.read_csv("tables/vocabulary.csv").set_index("source")
    assert pd.isna(vocab.loc["ours", "gain_min"])
    assert pd.notna(vocab.loc["ours", "gain"])
    assert vocab.loc["paper", "scale"] == "not stated"
    assert pd.isna(vocab.loc["paper", "gain"])
    # paper_vs_ours: the paper's scales only; micro is none of them, so no row holds ours
    pvo = pd.read_csv("tables/paper_vs_ours.csv")
    assert pvo["ours"].isna().all()
    assert pvo["evidence"].isna().all()
    # DVC metrics: one file per cell, its evidence first
    lev = json.loads(Path("metrics/micro/gpt2/leviathan/seed0.json").read_text())
    assert lev["evidence"] == "smoke test"
    assert lev["train_tokens"] == SMOKE_TOKENS
    assert lev["val_loss_gain"] == pytest.approx((3.1 - 3.0) / 3.1)
    assert sorted(p.name for p in Path("metrics").rglob("*.json")) == ["seed0.json"] * 2


def test_the_size_is_the_configs_value(micro: Path) -> None:
    write_report(_config(below_tokens=SMOKE_TOKENS), "tables", None, metrics_dir="metrics")
    assert set(pd.read_csv("tables/main.csv")["evidence"]) == {"full run"}
    assert "SMOKE" not in Path("tables/main.md").read_text()
    write_report(_config(below_tokens=SMOKE_TOKENS + 1), "tables", None, metrics_dir="metrics")
    assert "a stated reason" in Path("tables/main.md").read_text()


def test_stale_cells_leave_the_dvc_metrics(micro: Path) -> None:
    stale = layout.dvc_metrics_file("metrics", "micro/gpt2/albert/seed0")
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    write_report(_config(), "tables", None, metrics_dir="metrics")
    assert not stale.exists()


@pytest.mark.skipif(not (BIN / "dvc").exists(), reason="dvc is not installed in the environment")
def test_dvc_metrics_show_prints_one_row_per_cell(micro: Path) -> None:
    write_report(_config(), "tables", None)  # the study's own metrics directory
    root = Path(__file__).parents[2]
    for name in ("dvc.yaml", "params.yaml", "config/config.yaml"):  # dvc.yaml reads the study
        Path(name).parent.mkdir(exist_ok=True)
        shutil.copy(root / name, name)
    subprocess.run([str(BIN / "dvc"), "init", "--no-scm", "-q"], check=True)
    shown = subprocess.run(
        [str(BIN / "dvc"), "metrics", "show"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    header, *rows = [line for line in shown if line.strip()]
    assert "evidence" in header
    assert "train_tokens" in header
    assert "val_loss" in header
    assert len(rows) == 2
    assert all("smoke test" in r for r in rows)
    # a row per cell, found under the study's directory (DVC reads the metrics folder whole)
    assert all(r.startswith("results/report/metrics/embedded/micro/gpt2/") for r in rows)


def _figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures as drawn (titles readable), saved nowhere."""
    drawn: dict[str, Any] = {}

    def keep(fig: Any, out_dir: Any, name: str, inputs: Any) -> list[Path]:
        drawn[name] = fig
        return []

    monkeypatch.setattr(drawing, "save_figure", keep)
    csvs = {p.stem: p for p in Path("tables").glob("*.csv")}  # the tables the study built
    se = [Path(layout.sample_efficiency_path("embedded", "micro", "gpt2", 0))]
    cells = [Cell("micro", "gpt2", v, 0, "embedded") for v in ("tied", "leviathan")]
    figures.write_figures(csvs, se, "figures", SmokePolicy.default(), cells)
    return drawn


def _titles(fig: Any) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def test_figures_say_smoke_test_and_keep_the_paper_apart(
    micro: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_report(_config(), "tables", None, metrics_dir="metrics")
    drawn = _figures(monkeypatch)
    # no evaluation along training in this config: no such figure (not an empty panel); the
    # others, each with the table it draws
    assert set(drawn) == {"loss_curves", "frequency", "vocabulary", "ablation", "training"} | {
        "recon",
        "lev_health",
    }
    assert set(layout.FIGURE_NAMES) == {*drawn, "along"}
    for name, fig in drawn.items():
        assert "SMOKE TEST" in fig._suptitle.get_text(), name
    (curves,) = _titles(drawn["loss_curves"])
    assert f"micro, {SMOKE_TOKENS:,} tokens, seed 0" in curves
    assert "periodic" in drawn["loss_curves"].axes[0].get_ylabel()  # not the evaluation's loss
    # the paper's 400m ablation is not micro: its own panel, marked as the paper's
    ours, paper = _titles(drawn["ablation"])
    assert ours.startswith(f"ours: micro / gpt2: {SMOKE_TOKENS:,} tokens")
    assert "smoke test" in ours
    assert paper.startswith("THE PAPER")
    assert "400m" in paper
    assert [t.startswith("THE PAPER") for t in _titles(drawn["vocabulary"])] == [False, True]
    assert all(f"{SMOKE_TOKENS:,} tokens" in t for t in _titles(drawn["frequency"]))
    # training: loss, lr and gradient norm of each cell, read back from its metrics.jsonl
    panels = drawn["training"].axes
    assert [ax.get_ylabel().split()[0] for ax in panels] == ["training", "learning", "gradient"]
    records = [
        json.loads(line)
        for line in Path(
            layout.run_dir(Cell("micro", "gpt2", "tied", 0, "embedded")), "metrics.jsonl"
        )
        .read_text()
        .splitlines()
    ]
    train = [r for r in records if r["kind"] == "train"]
    for ax, key in zip(panels, ("loss", "lr", "grad_norm"), strict=True):
        assert [line.get_label() for line in ax.lines] == ["leviathan", "tied"]  # cells sorted
        tied = ax.lines[1]
        assert list(tied.get_xdata()) == [r["tokens"] for r in train]
        assert list(tied.get_ydata()) == [r[key] for r in train]
        assert f"micro, {SMOKE_TOKENS:,} tokens, seed 0" in ax.get_title()
    # lev_health: each statistic of the leviathan cell (tied has no LEV: no line), read back from
    # its metrics.jsonl's lev_health records at init and each validation, against the tokens
    # of the validation at the same step; per-head statistics as the heads' mean and range
    lev_records = [
        json.loads(line)
        for line in Path(
            layout.run_dir(Cell("micro", "gpt2", "leviathan", 0, "embedded")), "metrics.jsonl"
        )
        .read_text()
        .splitlines()
    ]
    health = [r for r in lev_records if r["kind"] == "lev_health"]
    tokens = {0: 0} | {r["step"]: r["tokens"] for r in lev_records if r["kind"] == "val"}
    assert [r["step"] for r in health] == [0, 1, 2, 3]
    panels = drawn["lev_health"].axes
    keys = ["near_ends", "log_std_M", "rms_head", "emb_vs_head_rms", "mean_cosine"]
    assert len(panels) == len(keys)
    for ax, key in zip(panels, keys, strict=True):
        (line,) = ax.lines
        assert line.get_label() == "leviathan"
        assert list(line.get_xdata()) == [tokens[r["step"]] for r in health]
        values = [r[key] for r in health]
        if isinstance(values[0], list):  # per head: the mean, the range shaded
            (band,) = ax.collections
            ys = band.get_paths()[0].vertices[:, 1]
            assert min(ys) == pytest.approx(min(min(v) for v in values))
            assert max(ys) == pytest.approx(max(max(v) for v in values))
            values = [sum(v) / len(v) for v in values]
        assert list(line.get_ydata()) == pytest.approx(values)
        assert f"micro, {SMOKE_TOKENS:,} tokens, seed 0" in ax.get_title()


def test_figure_legends_carry_each_cells_recipe(
    micro: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell trained on another recipe than its scale's default is named with it in every
    legend that draws it per variant (from its recorded training config, as the tables' recipe)."""
    marker = Path(layout.final_marker(Cell("micro", "gpt2", "leviathan", 0, "embedded")))
    state = json.loads(marker.read_text())
    state["train_config"]["lr"] = 1e-3
    marker.write_text(json.dumps(state))
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(
        drawing, "save_figure", lambda fig, out, name, inputs: drawn.update({name: fig}) or []
    )
    se = [layout.sample_efficiency_path("embedded", "micro", "gpt2", 0)]
    write_report({**_config(), "studies": {"main": STUDY}}, "tables", "figures", se, "m")
    recipe = pd.read_csv("tables/main.csv").set_index("row").loc["micro/gpt2/leviathan", "recipe"]
    assert recipe == "lr=1e-3"
    for name in ("training", "loss_curves"):
        labels = drawn[name].axes[0].get_legend_handles_labels()[1]
        assert f"leviathan ({recipe})" in labels and "tied" in labels, (name, labels)

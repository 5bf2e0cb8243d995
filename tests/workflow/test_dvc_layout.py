"""dvc.yaml is YAML and cannot import leviathan.layout: hold each path it names against layout."""

from __future__ import annotations

from pathlib import Path

import yaml

from leviathan import layout

ROOT = Path(__file__).resolve().parents[2]


def _dvc() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def _outs(stage: dict) -> list[str]:
    return [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"]]


def test_stage_outputs_are_the_layout_roots() -> None:
    stages = _dvc()["stages"]
    data_root = Path(layout.CORPUS_ROOT).parent
    assert data_root == Path(layout.TOKENS_ROOT).parent
    assert _outs(stages["data"]) == [str(data_root)]
    assert _outs(stages["train"]) == [layout.RUNS_ROOT]
    assert _outs(stages["evaluate"]) == [layout.EVAL_ROOT]
    assert _outs(stages["report"])[0] == layout.REPORT_DIR


def test_metrics_and_plots_are_layout_files() -> None:
    """Metrics: every study's (one folder, each study's cells under its own); plots: the
    default study's (config/config.yaml)."""
    dvc = _dvc()
    assert [Path(m) for m in dvc["metrics"]] == [Path(layout.DVC_METRICS_DIR)]
    default = yaml.safe_load((ROOT / layout.DEFAULT_CONFIG).read_text())
    results = layout.config_results_key(default)
    for entry in dvc["plots"]:
        path = Path(next(iter(entry)) if isinstance(entry, dict) else entry)
        name = path.stem
        assert path in (
            layout.plot_file(layout.plots_dir(results), name),
            layout.figure_files(layout.figures_dir(results), name)["png"],
        ), f"dvc.yaml plot {path} is not where leviathan.layout puts {name}"

"""dvc.yaml is YAML and cannot import leviathan.layout: hold each path it names against layout,
for the study params.yaml names (DVC's templating of `${study_name}` and `${corpus}`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from leviathan import layout
from leviathan.cells import Cell
from leviathan.study.config import resolve

ROOT = Path(__file__).resolve().parents[2]


def _dvc() -> dict:
    """dvc.yaml with params.yaml's values in place of `${name}`, as DVC renders it."""
    text = (ROOT / "dvc.yaml").read_text()
    for key, value in yaml.safe_load((ROOT / "params.yaml").read_text()).items():
        text = text.replace("${" + key + "}", str(value))
    return yaml.safe_load(text)


def _outs(stage: dict) -> list[str]:
    return [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"]]


def test_params_yaml_names_its_study_as_the_study_file_does() -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    config = resolve([ROOT / params["study"]], root=ROOT)
    assert params["study_name"] == config["study_name"]
    assert params["corpus"] == config["corpus"]["name"]


def test_stage_outputs_are_the_study_s_own_folders() -> None:
    """Each stage's outputs are the study's (its corpus's data, its runs, evaluations, report),
    never a folder shared with another study or holding ad-hoc runs."""
    stages = _dvc()["stages"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    key, corpus = layout.results_key(params["study_name"]), params["corpus"]
    cell = Cell("micro", "gpt2", "tied", 0, key)
    data = [layout.corpus_dir(corpus), layout.TOKENS_ROOT + "/" + corpus, layout.EVAL_DATA_ROOT]
    assert _outs(stages["data"]) == data
    assert layout.EVAL_DATA_ROOT in stages["evaluate"]["deps"]
    assert layout.tokens_dir(corpus, "gpt2").startswith(_outs(stages["data"])[1] + "/")
    assert _outs(stages["train"]) == [str(Path(layout.run_dir(cell)).parents[3])]
    assert _outs(stages["evaluate"]) == [str(Path(layout.eval_dir(cell)).parents[3])]
    assert _outs(stages["report"]) == [layout.report_dir(key), layout.dvc_metrics_dir_of(key)]
    assert layout.report_zip(key) in stages["report"]["cmd"]
    for name, stage in stages.items():
        for out in _outs(stage):
            assert out not in (layout.RUNS_ROOT, layout.EVAL_ROOT, layout.REPORT_DIR, "data"), name


def test_metrics_and_plots_are_the_study_s_layout_files() -> None:
    dvc = _dvc()
    results = yaml.safe_load((ROOT / "params.yaml").read_text())["study_name"]
    assert [Path(m) for m in dvc["metrics"]] == [Path(layout.dvc_metrics_dir_of(results))]
    for entry in dvc["plots"]:
        path = Path(next(iter(entry)) if isinstance(entry, dict) else entry)
        name = path.stem
        assert path in (
            layout.plot_file(layout.plots_dir(results), name),
            layout.figure_files(layout.figures_dir(results), name)["png"],
        ), f"dvc.yaml plot {path} is not where leviathan.layout puts {name}"

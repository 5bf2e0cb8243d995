"""leviathan.layout is the one home of the pipeline's paths: the workflow's rules, the trainer's
checkpoints and the evaluation's loader all agree with it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from leviathan import layout
from leviathan.cells import Cell
from leviathan.checkpoint import files
from leviathan.checkpoint.store import latest_checkpoint, save_checkpoint
from leviathan.eval.checkpoint import resolve_checkpoint

CELL = Cell("400m", "o200k_base", "leviathan", 0, "pile")


def test_cell_paths_are_readable_and_stable() -> None:
    assert layout.run_dir(CELL) == "results/runs/pile/400m/o200k_base/leviathan/seed0"
    assert (
        layout.final_marker(CELL)
        == "results/runs/pile/400m/o200k_base/leviathan/seed0/checkpoints/final/state.json"
    )
    assert layout.eval_dir(CELL) == "results/eval/pile/400m/o200k_base/leviathan/seed0"
    assert layout.export_dir(CELL) == "results/export/pile/400m/o200k_base/leviathan/seed0"
    assert layout.tables_dir("pile") == "results/report/pile/tables"
    assert layout.cell_log("train", CELL) == "logs/train/pile/400m/o200k_base/leviathan/seed0.log"
    assert CELL.key == "400m/o200k_base/leviathan/seed0"


def test_a_study_s_results_are_keyed_by_its_name_else_its_corpus() -> None:
    assert layout.results_key("lr_sweep") == "lr_sweep"
    config = {"corpus": {"name": "mytext"}, "study_name": "a"}
    assert layout.config_results_key(config) == "a"
    assert layout.config_results_key({"corpus": {"name": "mytext"}}) == "mytext"
    assert layout.study_record("a") == Path("results/runs/a/study.json")
    with pytest.raises(ValueError, match="reserved"):
        layout.results_key("metrics")


def test_the_inverses_undo_the_paths() -> None:
    assert layout.parse_cell_key(CELL.key) == ("400m", "o200k_base", "leviathan", 0)
    assert layout.record_cell_key({**CELL.as_wildcards(), "step": 3}) == CELL.key
    with pytest.raises(ValueError, match="SCALE/VOCAB/VARIANT/seedN"):
        layout.parse_cell_key("400m/o200k_base/leviathan/0")
    assert layout.run_of(layout.final_marker(CELL)) == layout.run_dir(CELL)
    assert layout.eval_cell_key(layout.eval_output(CELL, "val")) == CELL.key
    assert layout.eval_cell_key("elsewhere/val.json") is None
    se = layout.sample_efficiency_path("pile", "400m", "o200k_base", 3)
    assert layout.sample_efficiency_group(se) == ("400m", "o200k_base", "seed3")
    assert layout.is_sample_efficiency(se)
    shard = layout.shard_path(layout.tokens_dir("pile", "gpt2"), "val")
    assert layout.dir_of(shard) == layout.tokens_dir("pile", "gpt2")
    assert files.step_of(files.step_dir("x", 1234)) == 1234
    assert files.step_of(files.final_dir("x")) is None
    assert layout.benchmark_rule(layout.benchmark_path("d", "sample_efficiency", "seed0")) == (
        "sample_efficiency"
    )


def test_trainer_checkpoints_are_what_the_workflow_and_the_evaluation_expect(
    tmp_path: Path, monkeypatch
) -> None:
    """The trainer's writer puts the final checkpoint where the train rule's output says and
    where the evaluation's loader looks for it."""
    monkeypatch.chdir(tmp_path)
    run = layout.run_dir(CELL)
    for name, step in ((files.step_dir("", 5).name, 5), (files.FINAL, 9)):
        save_checkpoint(
            files.checkpoints_dir(run),
            name,
            model_state={"w": torch.ones(2)},
            optim_state={"state": {}, "param_groups": []},
            state={"step": step},
        )
    assert Path(layout.final_marker(CELL)).is_file()
    assert resolve_checkpoint(run) == files.final_dir(run)
    ref = latest_checkpoint(files.checkpoints_dir(run))
    assert ref is not None
    assert ref.path == files.final_dir(run)
    assert ref.step == 9


def test_a_dvc_metrics_file_names_its_folder_back() -> None:
    key = "micro/gpt2/leviathan/seed0"
    path = layout.dvc_metrics_file(layout.dvc_metrics_dir_of("embedded"), key)
    assert path == Path("results/report/metrics/embedded/micro/gpt2/leviathan/seed0.json")
    assert layout.dvc_metrics_dir(path, key) == Path(layout.dvc_metrics_dir_of("embedded"))


@pytest.mark.parametrize("module", ["base", "data", "outputs"])
def test_layout_exports_every_public_name_of_its_modules(module: str) -> None:
    """`layout.X` works for every public name its modules define, and for nothing they import
    (read from the source, not from the module's own list)."""
    path = Path(layout.__file__).with_name(f"{module}.py")
    defined: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    public = {name for name in defined if not name.startswith("_")} - {"__all__"}
    assert set(getattr(layout, module).__all__) == public
    assert all(hasattr(layout, name) for name in public)


def test_no_layout_name_is_defined_in_two_modules_or_imported() -> None:
    """A name two modules define would be exported from whichever the package imports last;
    a name a module imports is not a layout name."""
    names = [*layout.base.__all__, *layout.data.__all__, *layout.outputs.__all__]
    assert len(names) == len(set(names))
    assert sorted(layout.__all__) == sorted(names)
    assert not hasattr(layout, "CHECKPOINTS")  # imported by base and outputs
    assert not hasattr(layout, "Path")

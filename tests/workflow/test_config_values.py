"""Config values are read as written and type-checked where the config is resolved (the
Snakefile and `leviathan config` share `check_config`): `lr: 1e-3` is a float, a bad type, a
micro_batch that does not divide the batch, or an override of a cell in no study is a one-line
error naming the fix, before any job starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.common.configfile import load_configfile
from workflow_helpers import ROOT, snakemake, workflow_copy

from leviathan.cells import Cell
from leviathan.study.config import resolve
from leviathan.study.launch import cell_args
from leviathan.study.resolve import cell_train_config

STUDY = {"main": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied", "leviathan"]}}
CELL = "micro/gpt2/leviathan/seed0"


def _file(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "config" / "study.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"studies": STUDY, **sections}).replace("'1e-3'", "1e-3"))
    return path


def test_exponent_numbers_are_floats_in_the_resolved_config(tmp_path: Path) -> None:
    study = _file(tmp_path, train={CELL: {"lr": "1e-3"}, "micro": {"total_tokens": "3e4"}})
    assert "lr: 1e-3" in study.read_text()  # unquoted, as a user writes it
    assert load_configfile(str(study))["train"][CELL]["lr"] == "1e-3"  # Snakemake's reader
    config = resolve([study], root=ROOT)
    assert config["train"][CELL] == {"lr": 1e-3}
    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    assert cell_train_config(config, cell).lr == 1e-3
    assert cell_train_config(config, cell).total_tokens == 30_000
    assert "lr=0.001" in cell_args(cell, config, "data/tokens", "results/runs/x")


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"train": {"micro": {"lr": "fast"}}},
            "config train.micro: lr='fast' is not a number: give a number, e.g. lr=3e-4",
        ),
        (
            {"train": {"micro": {"micro_batch": 3}}},
            "train.micro_batch=3 does not divide the per-rank batch 8 (= global_batch 8 / 1 "
            "ranks): choose a divisor of it",
        ),
        (
            {"train": {"micro/gpt2/untied/seed0": {"lr": 0.01}}},
            "config train.micro/gpt2/untied/seed0: this cell is in no study (studies: main): "
            "add it to a study's",
        ),
        (
            {"runtime": {"validation": {"every": "often"}}},
            "config runtime: validation.every='often' is not an integer",
        ),
        (
            {"speed": 3},
            "config (top level): Additional properties are not allowed ('speed' was unexpected)",
        ),
        # the runtime's keys, types and ranges are RuntimeConfig's (the schema holds no copy)
        (
            {"runtime": {"device": "bogus"}},
            "config runtime: device='bogus' is not a device",
        ),
        (
            {"runtime": {"checkpoint": {"keep_last": 0}}},
            "config runtime: checkpoint.keep_last=0 must be >= 1",
        ),
        (
            {"runtime": {"wandb": True}},
            "config runtime: wandb=True: wandb is a block of its own keys (enabled, project, "
            "entity, mode)",
        ),
        (
            {"runtime": {"keep_last": 2}},
            "config runtime: unknown key 'keep_last': valid keys are device, compile",
        ),
        (
            {"runtime": {"checkpoint": {"often": 2}}},
            "config runtime: unknown key checkpoint.often: valid keys are checkpoint.every",
        ),
        ({"runtime": {"compile": "yes"}}, "config runtime: compile='yes' is not true or false"),
        (
            {"runtime": {"parallel": "fsdp"}},
            "config runtime.parallel='fsdp': set per scale, not here: write resources: "
            "{<scale>: {parallel: fsdp}}",
        ),
        ({"runtime": 5}, "config runtime: 5 is not of type 'object'"),
        ({"corpus": {"name": ".."}}, "config corpus.name: '..' does not match"),
        ({"corpus": {"name": "a/b"}}, "config corpus.name: 'a/b' does not match"),
        ({"train": {"micro": {"eps": -1.0}}}, "train.eps=-1.0 must be > 0"),
        ({"train": {"micro": {"betas": [0.9, 1.5]}}}, "train.betas=[0.9, 1.5] must each be in"),
        ({"train": {"micro": {"context": 4096}}}, "train.context=4096 exceeds the model's"),
    ],
)
def test_bad_values_fail_at_resolution_in_one_line(
    tmp_path: Path, sections: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as e:
        resolve([_file(tmp_path, **sections)], root=ROOT)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_yaml_syntax_error_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("studies:\n  main: {scales: [micro]\n")
    with pytest.raises(ValueError, match=rf"^{bad}: not valid YAML \(line 3, column 1\)"):
        resolve([bad], root=ROOT)


@pytest.mark.slow
def test_snakemake_refuses_a_bad_value_before_any_job(tmp_path: Path) -> None:
    """The Snakefile runs the same check: `snakemake -n` fails naming the key; `1e-3` passes."""
    work = workflow_copy(tmp_path)
    bad = _file(tmp_path, train={"micro": {"lr": "fast"}})
    run = snakemake(work, "all", "-n", "--configfile", str(bad))
    assert run.returncode != 0
    assert "config train.micro: lr='fast' is not a number" in run.stdout + run.stderr
    good = _file(tmp_path, train={CELL: {"lr": "1e-3"}})
    run = snakemake(work, "all", "-n", "--configfile", str(good))
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", "../x", ""])
def test_corpus_name_is_a_plain_name_in_code_too(name: str) -> None:
    """The code refuses what the schema's pattern refuses (a config checked without it)."""
    from leviathan.study.config import check_names

    with pytest.raises(ValueError, match=r"config corpus.name .*: not a plain directory name"):
        check_names({"corpus": {"name": name}})


def test_runtime_ranges_are_checked_in_code_too() -> None:
    from leviathan.study.config import check_config

    config = {"studies": STUDY, "runtime": {"dist_timeout_s": 0}}
    with pytest.raises(ValueError, match=r"^config runtime: dist_timeout_s=0 must be >= 1"):
        check_config(config)

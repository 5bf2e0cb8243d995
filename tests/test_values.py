"""One reader of values as written: YAML 1.2 numbers (`3e-4` is a float), KEY=VALUE items,
and values checked against a dataclass's own field types."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from leviathan.train.config import RuntimeConfig, TrainConfig, train_config
from leviathan.values import (
    coerce,
    format_assignment,
    load_yaml,
    parse_assignments,
    parse_number,
    split_assignment,
)

# written forms of numbers, each checked against Python's own float()/int() of the text
FLOATS = ["3e-4", "1E9", "2.5e-3", "-1e-3", "+1.5", ".5", "6e-4", "1.", "0.0003"]
INTS = ["0", "42", "-7", "1_000"]


@pytest.mark.parametrize("text", FLOATS)
def test_floats_as_python_reads_them(text: str) -> None:
    assert load_yaml(text) == float(text)
    assert isinstance(load_yaml(text), float)
    assert parse_number(text) == float(text)


@pytest.mark.parametrize("text", INTS)
def test_ints_stay_ints(text: str) -> None:
    assert load_yaml(text) == int(text)
    assert isinstance(load_yaml(text), int)


def test_pyyaml_alone_reads_3e_minus_4_as_text() -> None:
    """Why the reader exists: YAML 1.1 (PyYAML, Snakemake's configfile) needs a dot in a float."""
    assert yaml.safe_load("3e-4") == "3e-4"


def test_documents_keep_everything_else() -> None:
    text = "a: 3e-4\nb: [1, 2.5]\nc: true\nd: null\ne: gpt2\nf: '3e-4'\ng: .inf\n"
    doc = load_yaml(text)
    assert doc["a"] == pytest.approx(3e-4)
    assert doc["f"] == "3e-4"
    assert {k: v for k, v in doc.items() if k not in "af"} == {
        "b": [1, 2.5],
        "c": True,
        "d": None,
        "e": "gpt2",
        "g": float("inf"),
    }
    assert load_yaml(json.dumps({"x": 1e-5})) == {"x": 1e-5}


def test_yaml_syntax_error_is_one_line_with_its_place() -> None:
    with pytest.raises(ValueError, match=r"^f.yaml: not valid YAML \(line 2, column \d+\)") as e:
        load_yaml("a: 1\nb: : c\n", "f.yaml")
    assert "\n" not in str(e.value)


def test_assignments() -> None:
    got = parse_assignments(["lr=3e-4", "warmup_steps=10", "betas=[0.9, 0.95]"], "--set")
    assert got == {"lr": 3e-4, "warmup_steps": 10, "betas": [0.9, 0.95]}
    with pytest.raises(ValueError, match=r"--set 'lr': expected KEY=VALUE \(e.g. --set lr=3e-4\)"):
        parse_assignments(["lr"], "--set")


@pytest.mark.parametrize(
    ("item", "expected"),
    [("lr=3e-4", ("lr", "3e-4")), (" a =b=c", ("a", "b=c")), ("k=", ("k", ""))],
)
def test_split_assignment_at_the_first_equals_sign(item: str, expected: tuple[str, str]) -> None:
    assert split_assignment(item, "--x") == expected


@pytest.mark.parametrize(("item", "need_value"), [("lr", False), ("=1", False), ("k=", True)])
def test_split_assignment_refuses_what_is_no_assignment(item: str, need_value: bool) -> None:
    with pytest.raises(ValueError, match=r"^--data-files 'x': expected KEY=FILE$"):
        split_assignment(item, "--data-files 'x'", "KEY=FILE", need_value=need_value)


@pytest.mark.parametrize(
    "value", [3e-4, 1e-3, 10, True, None, [0.9, 0.95], {"a": 1, "b": [2.5]}, "gpt2", 1e20]
)
def test_formatted_assignments_read_back_as_the_value(value: Any) -> None:
    item = format_assignment("key", value)
    assert parse_assignments([item], "--set") == {"key": value}


@dataclass
class _Typed:
    lr: float = 0.0
    steps: int = 1
    warm: int | None = None
    on: bool = False
    name: str = ""
    betas: tuple[float, float] = (0.9, 0.999)
    extra: dict[str, Any] = field(default_factory=dict)


def test_coerce_converts_numbers_written_as_text() -> None:
    got = coerce(_Typed, {"lr": "1e-3", "steps": 1e9, "warm": None, "betas": ["0.9", 0.95]}, "x")
    assert got == {"lr": 1e-3, "steps": 1_000_000_000, "warm": None, "betas": (0.9, 0.95)}
    assert type(got["steps"]) is int
    assert type(got["lr"]) is float


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr": "fast"}, r"^cfg: lr='fast' is not a number: give a number, e.g. lr=3e-4$"),
        ({"steps": 2.5}, r"^cfg: steps=2.5 is not an integer"),
        ({"on": "yes please"}, r"^cfg: on='yes please' is not true or false"),
        ({"warm": "x"}, r"^cfg: warm='x' is not int or NoneType"),
        ({"name": 3}, r"^cfg: name=3 is not a string"),
        ({"betas": [0.9]}, r"^cfg: betas=\[0.9\] is not a list of 2"),
        ({"lr": True}, r"^cfg: lr=True is not a number"),
        ({"lr": float("inf")}, r"^cfg: lr=inf is not a finite number: give a finite number"),
        ({"lr": "-.inf"}, r"^cfg: lr='-.inf' is not a finite number"),
        ({"lr": float("nan")}, r"^cfg: lr=nan is not a finite number"),
        ({"betas": [0.9, ".nan"]}, r"^cfg: betas=\[0.9, '.nan'\] is not a finite number"),
        ({"speed": 1}, r"^cfg: unknown key 'speed': valid keys are lr, steps, warm, on, name"),
    ],
)
def test_coerce_errors_are_one_line_naming_the_fix(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        coerce(_Typed, values, "cfg")
    assert "\n" not in str(e.value)


def test_train_and_runtime_configs_read_values_as_written() -> None:
    cfg = train_config("micro", "gpt2", "leviathan", lr="3e-4", total_tokens="1e5")
    assert cfg.lr == 3e-4
    assert cfg.total_tokens == 100_000
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg  # a recorded config reads back equal
    runtime = RuntimeConfig.from_dict({"validation": {"every": "20"}, "threads": None})
    assert runtime.validation.every == 20
    assert RuntimeConfig.from_dict({"validation.every": "20"}) == runtime  # --runtime's form
    with pytest.raises(ValueError, match=r"^--runtime: validation.every='often' is not an int"):
        RuntimeConfig.from_dict({"validation": {"every": "often"}}, "--runtime")

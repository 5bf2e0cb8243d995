"""Values as a user writes them: `KEY=VALUE` overrides, YAML files, and their types.

One reader for every place a setting comes from (`leviathan train --set/--runtime/--config`,
the workflow's config through Snakemake and `leviathan config`):

* `load_yaml` reads YAML with YAML 1.2's numbers, so `3e-4` is a float (PyYAML follows YAML
  1.1, where a float needs a dot: `3e-4` would be the string '3e-4');
* `split_assignment` splits one `KEY=VALUE` item (every `KEY=...` argument goes through it);
  `parse_assignments` reads `KEY=VALUE` items, each value through `load_yaml`, and
  `format_assignment` writes one that `parse_assignments` reads back;
* `coerce` checks values against a dataclass's own field types (no second list of types) and
  converts what is a number written as text (`'1e-3'` from a YAML 1.1 reader such as
  Snakemake's) to that number. A value of the wrong type, or a float that is not finite
  (`.inf`, `.nan`: no setting takes one), raises a one-line ValueError naming the key, the
  expected type and an example.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

__all__ = [
    "coerce",
    "format_assignment",
    "load_yaml",
    "parse_assignments",
    "parse_number",
    "split_assignment",
]

_FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.2 (core schema) floats, with YAML 1.1's underscores: 3e-4, 1E9, .5, 2.5e-3, .inf, .nan
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's float syntax."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+0123456789."))


def load_yaml(text: str, where: str = "YAML") -> Any:
    """`text` as YAML with YAML 1.2 numbers; a syntax error is a one-line ValueError."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{where}: not valid YAML{at}: {problem}") from None


def split_assignment(
    item: str, where: str, form: str = "KEY=VALUE", *, need_value: bool = False
) -> tuple[str, str]:
    """`KEY=VALUE` text as (key, value text), the key stripped. No `=`, no key, or (with
    `need_value`) no value raises the one-line ValueError `{where}: expected {form}`."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip() or (need_value and not value):
        raise ValueError(f"{where}: expected {form}")
    return key.strip(), value


def parse_assignments(items: Iterable[str], option: str) -> dict[str, Any]:
    """`KEY=VALUE` items (e.g. `--set lr=3e-4`) as {key: value}, each value read as YAML."""
    out: dict[str, Any] = {}
    for item in items:
        where = f"{option} {item!r}"
        key, value = split_assignment(item, where, f"KEY=VALUE (e.g. {option} lr=3e-4)")
        out[key] = load_yaml(value, where)
    return out


def format_assignment(key: str, value: Any) -> str:
    """`key=value` for `parse_assignments`: a string as written (read as YAML, as a user's own
    `--set` is), any other value as JSON, which YAML reads back as the same value."""
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def parse_number(value: Any) -> int | float | None:
    """`value` as a number if it is one or is one written as text ('3e-4', '1_000'), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        if re.fullmatch(r"[-+]?[0-9]+", text):
            return int(text)
        if _FLOAT.match(text):  # YAML's .inf and .nan are Python's inf and nan
            return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
    return None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any) -> Any:
    """`value` as type `tp`; raise TypeError when it is not one."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value)
            except TypeError:
                continue
        raise TypeError(" or ".join(_type_name(a) for a in args))
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise TypeError(f"a list of {len(args)} ({', '.join(_type_name(a) for a in args)})")
        return tuple(_convert(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise TypeError("a mapping {key: value}")
        return dict(value)
    if tp not in _SCALARS:
        raise TypeError(_type_name(tp))
    name, convert = _SCALARS[tp]
    converted = convert(value)
    if converted is None:
        raise TypeError(name)
    if tp is float and not math.isfinite(converted):  # .inf, .nan: no setting takes them
        raise TypeError("a finite number")
    return converted


def _as_int(value: Any) -> int | None:
    number = parse_number(value)
    return int(number) if number is not None and float(number).is_integer() else None


def _as_float(value: Any) -> float | None:
    number = parse_number(value)
    return None if number is None else float(number)


# scalar field types: their name in errors, and value -> the value as that type (None: not one)
_SCALARS: dict[Any, tuple[str, Any]] = {
    bool: ("true or false", lambda v: v if isinstance(v, bool) else None),
    str: ("a string", lambda v: v if isinstance(v, str) else None),
    int: ("an integer", _as_int),
    float: ("a number", _as_float),
}


def coerce(cls: type, values: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    """`values` checked against the dataclass `cls`'s fields and converted to their types.

    `where` names the source in errors (e.g. "config train.micro", "--set"), `prefix` the block
    the keys belong to (`checkpoint.`: a key is named `checkpoint.every` in errors). Unknown keys
    and values of the wrong type raise a one-line ValueError naming the fix."""
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints or key not in known:
            raise ValueError(
                f"{where}: unknown key {prefix}{key}: valid keys are "
                f"{', '.join(prefix + k for k in known)}"
                if prefix
                else f"{where}: unknown key {key!r}: valid keys are {', '.join(known)}"
            )
        try:
            out[key] = _convert(hints[key], value)
        except TypeError as exc:
            example = _example(hints[key], prefix + key)
            raise ValueError(
                f"{where}: {prefix}{key}={value!r} is not {exc}: give {exc}, e.g. {example}"
            ) from None
    return out


def _example(tp: Any, key: str) -> str:
    for arg in (tp, *typing.get_args(tp)):
        if arg is float:
            return f"{key}=3e-4"
        if arg is int:
            return f"{key}=100"
        if arg is bool:
            return f"{key}=true"
    return f"{key}=..."


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys, `{"lev": {"n_heads": 4}}` ->
    `{"lev.n_heads": 4}` (an empty mapping adds nothing): how a nested config key is named
    in a message or a table."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out

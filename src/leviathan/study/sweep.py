"""Named variants and tagged cells: a sweep written as config, not code (README: "Sweep a
hyperparameter").

    variants:                       # a new variant name, usable wherever a built-in one is
      lev_h4: {base: leviathan, model: {lev: {n_heads: 4}}}
    tags:                           # a recipe change of a cell: `<variant>@<tag>` in a study
      lr1e-3: {train: {lr: 1.0e-3}}
    studies:
      sweep: {scales: [micro], vocabs: [gpt2], variants: [tied, lev_h4, leviathan@lr1e-3]}

A named variant's model is its base variant's (a built-in of leviathan.model.variants.VARIANTS)
with `model` deep-merged into the cell's `model_overrides` (keys of
leviathan.model.config.ModelConfig, `lev:` those of LEVConfig; `variant` and `vocab_size` are
the cell's own and cannot be set). A tag's `train` block holds recipe keys of
leviathan.train.config.TrainConfig, applied after config.train.<scale> and before
config.train.<cell key>. Each such cell records its name in its training config
(`variant_name`), so its fingerprint, run directory and table rows are its own.

`train.<scale or cell key>.model_overrides` is the same mechanism applied in place: it changes
a cell that keeps its name (and reruns it), where a named variant adds one beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from leviathan.train.config import TRAIN_IDENTITY

TAG_SEP = "@"
# a named variant or a tag: one path component and one Snakemake wildcard value (no `/`, `@`,
# `+`, space or leading dot), e.g. lev_h4, lr1e-3
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# ModelConfig fields a named variant cannot set: the cell's vocabulary and base decide them
MODEL_IDENTITY = ("variant", "vocab_size")


@dataclass(frozen=True)
class CellVariant:
    """What a study's variant name means: the built-in variant the model is built from, the
    model overrides of its named variant and the recipe overrides of its tag."""

    name: str  # as the study writes it: leviathan, lev_h4, leviathan@lr1e-3
    base: str  # a built-in variant (leviathan.model.variants.VARIANTS)
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)

    @property
    def named(self) -> bool:
        """Whether the cell is anything but a built-in variant as it is."""
        return self.name != self.base


def builtin_variants() -> list[str]:
    from leviathan.model.config import VARIANT_NAMES

    return list(VARIANT_NAMES)


def split_name(name: str) -> tuple[str, str | None]:
    """`leviathan@lr1e-3` -> ("leviathan", "lr1e-3"); `lev_h4` -> ("lev_h4", None)."""
    variant, sep, tag = str(name).partition(TAG_SEP)
    return variant, (tag if sep else None)


def _check_plain(where: str, name: Any, what: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(
            f"config {where}: {what} name {name!r} is not a plain name: use letters, digits, "
            "_, - and . (not first), no @, / or +, e.g. lev_h4 or lr1e-3"
        )


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mappings merged key by key at every depth."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def check_model_overrides(overrides: Any, where: str) -> dict[str, Any]:
    """Model overrides checked against ModelConfig's and LEVConfig's own fields and types and
    converted (`sigmoid_scale: 5e-1` as read by a YAML 1.1 reader is the float 0.5): an
    unknown key, `variant`/`vocab_size`, or a value of the wrong type raises a one-line
    ValueError naming `where` and the key."""
    from leviathan.model.config import LEVConfig, ModelConfig
    from leviathan.values import coerce

    if not isinstance(overrides, Mapping):
        raise ValueError(
            f"{where}: must be a mapping of model config keys, e.g. {{lev: {{n_heads: 4}}}}"
        )
    for key in MODEL_IDENTITY:
        if key in overrides:
            raise ValueError(
                f"{where}: {key} cannot be set here: "
                + ("use base: for the variant" if key == "variant" else "the cell's vocab sets it")
            )
    top = {k: v for k, v in overrides.items() if k != "lev"}
    known = [f.name for f in fields(ModelConfig) if f.name not in MODEL_IDENTITY]
    for key in top:
        if key not in known:
            raise ValueError(f"{where}: unknown key {key!r}: valid keys are {', '.join(known)}")
    out = coerce(ModelConfig, top, where)
    if "lev" in overrides:
        lev = overrides["lev"]
        if not isinstance(lev, Mapping):
            raise ValueError(f"{where}.lev: must be a mapping of LEV keys, e.g. {{n_heads: 4}}")
        out["lev"] = coerce(LEVConfig, lev, f"{where}.lev")
    return out


def check_recipe(values: Any, where: str) -> dict[str, Any]:
    """A recipe block (a tag's `train`): TrainConfig's recipe keys, checked and converted."""
    from leviathan.train.config import TrainConfig
    from leviathan.values import coerce

    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: must be a mapping of training keys, e.g. {{lr: 1.0e-3}}")
    recipe = [f.name for f in fields(TrainConfig) if f.name not in TRAIN_IDENTITY]
    for key in values:
        if key == "model_overrides":
            raise ValueError(
                f"{where}: model_overrides is no recipe change: a model change is a named "
                "variant (variants.<name>: {base: ..., model: {...}})"
            )
        if key not in recipe:
            raise ValueError(f"{where}: unknown key {key!r}: valid keys are {', '.join(recipe)}")
    return coerce(TrainConfig, values, where)


def check_definitions(config: Mapping[str, Any]) -> None:
    """config.variants and config.tags: their names plain (NAME), a named variant's base a
    built-in variant, its model keys and a tag's recipe keys the code's own; values converted
    in place. Raise a one-line ValueError naming the entry and the fix."""
    builtins = builtin_variants()
    variants = config.get("variants") or {}
    for name, spec in variants.items():
        where = f"variants.{name}"
        _check_plain("variants", name, "variant")
        if name in builtins:
            raise ValueError(
                f"config {where}: {name!r} is a built-in variant: give the new one its own name"
            )
        if not isinstance(spec, Mapping) or set(spec) - {"base", "model"}:
            raise ValueError(f"config {where}: expected {{base: <variant>, model: {{...}}}}")
        if spec.get("base") not in builtins:
            raise ValueError(
                f"config {where}.base: unknown variant {spec.get('base')!r}: use one of "
                f"{', '.join(builtins)}"
            )
        variants[name] = {
            "base": spec["base"],
            "model": check_model_overrides(spec.get("model") or {}, f"config {where}.model"),
        }
    tags = config.get("tags") or {}
    for name, spec in tags.items():
        where = f"tags.{name}"
        _check_plain("tags", name, "tag")
        if not isinstance(spec, Mapping) or set(spec) - {"train"}:
            raise ValueError(f"config {where}: expected {{train: {{<training key>: <value>}}}}")
        tags[name] = {"train": check_recipe(spec.get("train") or {}, f"config {where}.train")}


def check_variant_name(config: Mapping[str, Any], where: str, name: Any) -> None:
    """A study's (or a cell key's) variant: a built-in or a named variant, optionally
    `@<tag>` with the tag defined in config.tags."""
    variant, tag = split_name(str(name))
    valid = builtin_variants() + list(config.get("variants") or {})
    if variant not in valid:
        raise ValueError(
            f"config {where}: unknown variant {variant!r}: use one of {', '.join(valid)} "
            "(or define it under variants:)"
        )
    if tag is None:
        return
    _check_plain(where, tag, "tag")
    tags = config.get("tags") or {}
    if tag not in tags:
        raise ValueError(
            f"config {where}: {name!r} names the tag {tag!r}, which config.tags does not define "
            f"(tags: {', '.join(tags) or 'none'}): add tags.{tag}: {{train: {{...}}}}"
        )


def cell_variant(config: Mapping[str, Any], name: str) -> CellVariant:
    """What a study's variant name means (the config checked by check_definitions)."""
    variant, tag = split_name(name)
    spec = (config.get("variants") or {}).get(variant)
    base = spec["base"] if spec else variant
    model = dict(spec.get("model") or {}) if spec else {}
    train = dict(((config.get("tags") or {}).get(tag) or {}).get("train") or {}) if tag else {}
    return CellVariant(str(name), base, model, train)


def cell_overrides(config: Mapping[str, Any], scale: str, name: str, key: str) -> dict[str, Any]:
    """A cell's overrides of its scale's recipe: config.train.<scale>, its named variant's
    model (deep-merged into model_overrides), its tag's recipe, then config.train.<cell key>;
    `variant_name` where the cell is a named variant or a tagged one."""
    train = config.get("train") or {}
    cv = cell_variant(config, name)
    out: dict[str, Any] = {}
    layers = [train.get(scale) or {}, {"model_overrides": cv.model}, cv.train, train.get(key) or {}]
    for layer in layers:
        for k, v in layer.items():
            if k == "model_overrides":
                out[k] = deep_merge(out.get(k) or {}, v or {})
            else:
                out[k] = v
    if not out.get("model_overrides"):
        out.pop("model_overrides", None)
    if cv.named:
        out["variant_name"] = cv.name
    return out

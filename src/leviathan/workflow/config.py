"""The workflow's config, resolved exactly as the Snakefile resolves it.

The Snakefile loads `config/config.yaml` only when no `--configfile` is given: a study's
config file is complete on its own and never inherits the offline default's stand-ins. Keys a
file leaves out get the schema's defaults (Snakemake's `validate`), and the runtime and the
resources get theirs from the code (leviathan.train.config.workflow_runtime,
leviathan.workflow.steps.RESOURCE_DEFAULTS). The schema checks the config's shape; the names
in it (scales, vocabularies, variants, training keys) are checked against the code's own
registries by `check_names`, so the schema is no second registry. `resolve` does the same
steps with Snakemake's own functions, so `leviathan config show` prints what the workflow
will use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from leviathan.eval.standin import STAND_IN_DIR, is_stand_in
from leviathan.layout import CONFIG_SCHEMA, DEFAULT_CONFIG

__all__ = ["STAND_IN_DIR", "check_names", "resolve", "stand_in_files"]


def resolve(
    configfiles: Sequence[str | Path] = (),
    overrides: Mapping[str, Any] | None = None,
    root: str | Path = ".",
) -> dict[str, Any]:
    """The config a `snakemake [--configfile F ...] [--config k=v ...]` run in `root` uses."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config, validate

    root = Path(root)
    schema = root / CONFIG_SCHEMA
    if not schema.is_file():
        raise FileNotFoundError(
            f"{schema}: not found; run from the workflow's directory (the clone's root)"
        )
    config: dict[str, Any] = {}
    for path in configfiles or [root / DEFAULT_CONFIG]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: config file not found")
        update_config(config, load_configfile(str(path)))
    if overrides:
        update_config(config, dict(overrides))
    validate(config, str(schema.resolve()))
    check_names(config)
    return config


def _check_name(where: str, name: Any, kind: str, valid: Sequence[str]) -> None:
    if name not in valid:
        raise ValueError(f"config {where}: unknown {kind} {name!r}: use one of {', '.join(valid)}")


def check_names(config: Mapping[str, Any]) -> None:
    """The config's names against the code's registries, which the schema does not copy:
    each study's scales (leviathan.scales), vocabularies (leviathan.vocab) and variants
    (leviathan.model.variants), config.train's keys (a scale or a cell key
    <scale>/<vocab>/<variant>/seed<k>) and their recipe fields (leviathan.train.config.
    TrainConfig, the cell's identity apart), and config.resources' scales. Raise ValueError naming the value and the valid
    ones. The Snakefile calls this right after the schema's `validate`."""
    from leviathan.model.variants import VARIANTS
    from leviathan.scales import SCALES
    from leviathan.train.config import TrainConfig
    from leviathan.vocab import VOCABS

    registries = {"scale": list(SCALES), "vocabulary": list(VOCABS), "variant": list(VARIANTS)}
    for study, spec in (config.get("studies") or {}).items():
        for kind, key in (("scale", "scales"), ("vocabulary", "vocabs"), ("variant", "variants")):
            for name in spec.get(key) or ():
                _check_name(f"studies.{study}.{key}", name, kind, registries[kind])
    identity = ("scale", "vocab", "variant", "seed")
    recipe = [f.name for f in fields(TrainConfig) if f.name not in identity]
    for key, values in (config.get("train") or {}).items():
        parts = str(key).split("/")
        if len(parts) not in (1, 4):
            raise ValueError(
                f"config train.{key}: not a scale or a cell key "
                "<scale>/<vocab>/<variant>/seed<k> (e.g. 400m/o200k_base/leviathan/seed0)"
            )
        for kind, name in zip(("scale", "vocabulary", "variant"), parts, strict=False):
            _check_name(f"train.{key}", name, kind, registries[kind])
        if len(parts) == 4 and not re.fullmatch(r"seed[0-9]+", parts[3]):
            raise ValueError(f"config train.{key}: {parts[3]!r} is not seed<k> (e.g. seed0)")
        for name in values or {}:
            _check_name(f"train.{key}", name, "training key", recipe)
    for section in ("resources", "eval_resources"):
        for key in config.get(section) or {}:
            _check_name(section, key, "scale", registries["scale"])


def _data_files(section: Any) -> Iterator[str]:
    """Every local data file named anywhere in an evaluation section."""
    if isinstance(section, Mapping):
        for key, value in section.items():
            if key == "data_files":
                values = value.values() if isinstance(value, Mapping) else [value]
                for v in values:
                    yield from ([v] if isinstance(v, str) else v)
            else:
                yield from _data_files(value)
    elif isinstance(section, list):
        for item in section:
            yield from _data_files(item)


def stand_in_files(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per evaluation (wikitext, lm_eval): the offline stand-in files it reads, if any."""
    out: dict[str, list[str]] = {}
    for kind, section in (config.get("evaluate") or {}).items():
        files = sorted({f for f in _data_files(section) if is_stand_in(f)})
        if files:
            out[kind] = files
    return out

"""The workflow's config, resolved exactly as the Snakefile resolves it.

The Snakefile loads `config/config.yaml` only when no `--configfile` is given: a study's
config file is complete on its own and never inherits the offline default's stand-ins. Keys a
file leaves out get the schema's defaults (Snakemake's `validate`), and the runtime and the
resources get theirs from the code (leviathan.train.config.workflow_runtime,
leviathan.workflow.steps.RESOURCE_DEFAULTS). `resolve` does the same steps with Snakemake's
own functions, so `leviathan config show` prints what the workflow will use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from leviathan.eval.standin import STAND_IN_DIR, is_stand_in
from leviathan.layout import CONFIG_SCHEMA, DEFAULT_CONFIG

__all__ = ["STAND_IN_DIR", "resolve", "stand_in_files"]


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
    return config


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

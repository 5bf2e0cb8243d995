"""The workflow's config, resolved exactly as the Snakefile resolves it.

The Snakefile loads `config/config.yaml` only when no `--configfile` is given: a study's
config file is complete on its own and never inherits the offline default's stand-ins. Keys a
file leaves out get the schema's defaults (Snakemake's `validate`), and the runtime and the
resources get theirs from the code (leviathan.train.config.workflow_runtime,
leviathan.study.cluster.RESOURCE_DEFAULTS). The schema checks the config's shape; the names
in it (scales, vocabularies, variants, training keys) are checked against the code's own
registries by `check_names`, so the schema is no second registry; their values against the
code's own types, and each cell's whole training config, by `check_config`. `resolve` does the same
steps with Snakemake's own functions, so `leviathan config show` prints what the workflow
will use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from jsonschema.exceptions import ValidationError
from snakemake.common.configfile import load_configfile
from snakemake.utils import update_config, validate
from snakemake_interface_common.exceptions import WorkflowError

from leviathan.cells import cells
from leviathan.eval.standin import STAND_IN_DIR, is_stand_in
from leviathan.layout import CONFIG_SCHEMA, DEFAULT_CONFIG
from leviathan.scales import SCALES
from leviathan.study.cluster import resources
from leviathan.study.resolve import cell_train_config
from leviathan.study.sweep import check_definitions, check_model_overrides, check_variant_name
from leviathan.train.config import TRAIN_IDENTITY, RuntimeConfig, TrainConfig
from leviathan.values import coerce, load_yaml
from leviathan.vocab import VOCABS

__all__ = [
    "STAND_IN_DIR",
    "check_config",
    "check_names",
    "resolve",
    "stand_in_files",
]


def resolve(
    configfiles: Sequence[str | Path] = (),
    overrides: Mapping[str, Any] | None = None,
    root: str | Path = ".",
) -> dict[str, Any]:
    """The config a `snakemake [--configfile F ...] [--config k=v ...]` run in `root` uses."""
    root = Path(root)
    schema = root / CONFIG_SCHEMA
    if not schema.is_file():
        raise FileNotFoundError(
            f"{schema}: not found; run from the workflow's directory (the clone's root)"
        )
    config: dict[str, Any] = {}
    for path in configfiles or [root / DEFAULT_CONFIG]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such config file")
        check_mapping(load_yaml(Path(path).read_text(), str(path)), path)  # in one line
        try:
            update_config(config, load_configfile(str(path)))
        except WorkflowError as exc:
            raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from None
    if overrides:
        update_config(config, dict(overrides))
    try:
        validate(config, str(schema.resolve()))
    except WorkflowError as exc:
        raise ValueError(schema_error(exc, configfiles or [root / DEFAULT_CONFIG])) from None
    check_config(config)
    return config


def check_mapping(content: Any, path: str | Path) -> None:
    """Refuse, in one line, a config file that is not a mapping of keys (empty, or a YAML list,
    string or number at its top level)."""
    if isinstance(content, Mapping):
        return
    what = "empty" if content is None else f"a YAML {_YAML_KINDS.get(type(content), 'value')}"
    raise ValueError(
        f"{path}: is {what}, not a config: write its keys at the top level (studies:, "
        f"corpus:, train:, ...), as {DEFAULT_CONFIG} does"
    )


_YAML_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}


def schema_error(exc: Exception, configfiles: Sequence[str | Path]) -> str:
    """Snakemake's schema failure (a WorkflowError wrapping jsonschema's, dozens of lines) as
    one line: the config file(s), the key's path, what is wrong, where the keys are described."""
    cause = exc.__context__  # Snakemake raises its error while handling jsonschema's
    files = ", ".join(str(f) for f in configfiles)
    if not isinstance(cause, ValidationError):
        return f"{files}: {str(exc).splitlines()[0]}"
    where = ".".join(str(p) for p in cause.absolute_path) or "(top level)"
    return (
        f"{files}: config {where}: {cause.message}: the keys and their types are in {CONFIG_SCHEMA}"
    )


def check_config(config: dict[str, Any]) -> None:
    """Everything about the config the schema cannot say, before any job starts; the Snakefile
    calls it right after the schema's `validate`. The names (`check_names`); config.train's and
    config.runtime's values, checked against TrainConfig's and RuntimeConfig's own field types
    and converted in place (`lr: 3e-4`, which Snakemake's YAML 1.1 reader leaves a string, is
    the float 0.0003; `lr: fast` is an error); config.runtime's keys and ranges (RuntimeConfig
    is their one declaration: the schema only says it is a mapping); a per-cell key for a cell
    in no study; and every cell's whole training config (e.g. a micro_batch that does not divide the per-GPU batch).
    Raise a one-line ValueError naming the value and the fix."""
    check_names(config)
    train = config.get("train") or {}
    for key, values in train.items():
        train[key] = coerce(TrainConfig, values or {}, f"config train.{key}")
        if "model_overrides" in train[key]:
            train[key]["model_overrides"] = check_model_overrides(
                train[key]["model_overrides"], f"config train.{key}.model_overrides"
            )
    runtime = {k: v for k, v in (config.get("runtime") or {}).items() if v is not None}
    if runtime.get("parallel", "ddp") != "ddp":
        raise ValueError(
            f"config runtime.parallel={runtime['parallel']!r}: set per scale, not here: write "
            f"resources: {{<scale>: {{parallel: {runtime['parallel']}}}}}"
        )
    config.get("runtime", {}).update(RuntimeConfig.coerce(runtime, "config runtime"))
    RuntimeConfig.from_dict(runtime, "config runtime")  # the values' ranges
    study_cells = cells(config.get("studies") or {}, "")  # keys and recipes here, no paths
    keys = {c.key for c in study_cells}
    for key in train:
        if "/" in str(key) and key not in keys:
            raise ValueError(
                f"config train.{key}: this cell is in no study (studies: "
                f"{', '.join(config.get('studies') or {}) or 'none'}): add it to a study's "
                "scales/vocabs/variants/seeds, or remove the override"
            )
    _check_cells(config, study_cells)


def _check_cells(config: Mapping[str, Any], study_cells: Sequence[Any]) -> None:
    """Each cell's training config and the model it trains (a named variant's merged model
    config among them: e.g. lev.n_heads that does not divide D)."""
    for cell in study_cells:
        try:
            tc = cell_train_config(config, cell)
            tc.validate(max(1, int(resources(config, cell.scale)["gpu"])))
            tc.model_config()
        except ValueError as exc:
            raise ValueError(f"config, cell {cell.key}: {exc}") from None


def _check_name(where: str, name: Any, what: str, valid: Sequence[str]) -> None:
    """`name` (a `what`: scale, vocabulary, training key) against the `valid` ones."""
    if name not in valid:
        raise ValueError(f"config {where}: unknown {what} {name!r}: use one of {', '.join(valid)}")


def _check_seed_scales(study: str, spec: Mapping[str, Any]) -> None:
    """A study's `seeds_by_scale` names only scales of the study."""
    scales = list(spec.get("scales") or ())
    for scale in spec.get("seeds_by_scale") or {}:
        if scale not in scales:
            raise ValueError(
                f"config studies.{study}.seeds_by_scale: {scale!r} is not one of the study's "
                f"scales ({', '.join(scales)}): add it to studies.{study}.scales or remove its seeds"
            )


def check_names(config: Mapping[str, Any]) -> None:
    """The config's names against the code's registries, which the schema does not copy:
    config.variants and config.tags (leviathan.study.sweep.check_definitions, values
    converted in place), each study's scales (leviathan.scales), vocabularies
    (leviathan.vocab) and variants (leviathan.model.variants, the named ones, either with
    `@<tag>`), config.train's keys (a scale or a cell key <scale>/<vocab>/<variant>/seed<k>)
    and their recipe fields (leviathan.train.config.TrainConfig, the cell's identity apart),
    and config.resources' scales. Raise ValueError naming the value and the valid ones."""
    check_definitions(config)  # converts their values in place
    registries = {"scale": list(SCALES), "vocabulary": list(VOCABS)}
    for study, spec in (config.get("studies") or {}).items():
        for registry, key in (("scale", "scales"), ("vocabulary", "vocabs")):
            for name in spec.get(key) or ():
                _check_name(f"studies.{study}.{key}", name, registry, registries[registry])
        for name in spec.get("variants") or ():
            check_variant_name(config, f"studies.{study}.variants", name)
        _check_seed_scales(study, spec)
    recipe = [f.name for f in fields(TrainConfig) if f.name not in TRAIN_IDENTITY]
    for key, values in (config.get("train") or {}).items():
        parts = str(key).split("/")
        if len(parts) not in (1, 4):
            raise ValueError(
                f"config train.{key}: not a scale or a cell key "
                "<scale>/<vocab>/<variant>/seed<k> (e.g. 400m/o200k_base/leviathan/seed0)"
            )
        for registry, name in zip(("scale", "vocabulary"), parts, strict=False):
            _check_name(f"train.{key}", name, registry, registries[registry])
        if len(parts) == 4:
            check_variant_name(config, f"train.{key}", parts[2])
        if len(parts) == 4 and not re.fullmatch(r"seed[0-9]+", parts[3]):
            raise ValueError(f"config train.{key}: {parts[3]!r} is not seed<k> (e.g. seed0)")
        for name in values or {}:
            _check_name(f"train.{key}", name, "training key", recipe)
    for section in ("resources", "eval_resources"):
        for key in config.get(section) or {}:
            _check_name(section, key, "scale", registries["scale"])
    _check_corpus_name((config.get("corpus") or {}).get("name"))


def _check_corpus_name(name: Any) -> None:
    """corpus.name is one plain directory name: never `.`, `..` or a path."""
    if name is not None and not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", str(name)):
        raise ValueError(
            f"config corpus.name {name!r}: not a plain directory name; use letters, digits, "
            "_, - and . (not first), e.g. pile or my_corpus"
        )


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
    for evaluation, section in (config.get("evaluate") or {}).items():
        files = sorted({f for f in _data_files(section) if is_stand_in(f)})
        if files:
            out[evaluation] = files
    return out

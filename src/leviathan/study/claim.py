"""Whose results folder this is: two studies never write into one.

Every study writes its results under its `study_name` (or, where a config gives none, its
corpus's name: leviathan.layout.config_results_key). Two config files could still name the
same study, or leave it unnamed on one corpus. So the first run of a study records whose the
folder is, in results/runs/<study_name>/study.json (layout.study_record): its config file,
its corpus and its cells. Every later run, dry runs included, compares before any job:

- the same config file and corpus: the same study, whatever its cells are now (an edit of the
  study, such as a seed added or a recipe changed, reruns what it changes); the record is
  updated when the run starts;
- another config file, or another corpus: another study that would write into this one's
  folder and replace its report. It is refused in one line that says how to fix it.

The config file is the first `--configfile` given (config/config.yaml when none is), so that
files given after it (DVC's config/overrides.yaml) change the study and are not a new one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import config_cells
from leviathan.io import read_json_object, write_json


def study_file(configfiles: Sequence[str | os.PathLike[str]], root: str | Path = ".") -> str:
    """The config file that names the study: the first one given (the default config when
    none is), relative to `root` when it lies inside it, with / separators."""
    path = Path(configfiles[0]) if configfiles else Path(layout.DEFAULT_CONFIG)
    full, base = (Path(root) / path).resolve(), Path(root).resolve()
    return full.relative_to(base).as_posix() if full.is_relative_to(base) else str(full)


def claim(config: Mapping[str, Any], configfile: str) -> dict[str, Any]:
    """What a run of `config` (read from `configfile`) records of its study."""
    return {
        "study_name": layout.config_results_key(config),
        "config": configfile,
        "corpus": config["corpus"]["name"],
        "cells": sorted(c.key for c in config_cells(config)),
    }


def check_claim(new: Mapping[str, Any], root: str | Path = ".") -> None:
    """Refuse, in one line, a study that would write into another study's results folder."""
    record = Path(root) / layout.study_record(layout.results_key(new["study_name"]))
    if not record.is_file():
        return
    old = read_json_object(record)
    if (old.get("config"), old.get("corpus")) == (new["config"], new["corpus"]):
        return
    name = new["study_name"]
    raise ValueError(
        f"study_name {name!r}: results/*/{name}/ hold the study of {old.get('config')} "
        f"(corpus {old.get('corpus')}, {len(old.get('cells') or [])} cells), not of "
        f"{new['config']} (corpus {new['corpus']}, {len(new['cells'])} cells): give "
        f"{new['config']} a study_name of its own; only if it is the same study moved to "
        f"another file, delete {layout.study_record(name)} and run again"
    )


def record_claim(new: Mapping[str, Any], root: str | Path = ".") -> None:
    """Write the study's record (when the workflow starts its jobs), if it changed."""
    record = Path(root) / layout.study_record(layout.results_key(new["study_name"]))
    if record.is_file() and read_json_object(record) == dict(new):
        return
    record.parent.mkdir(parents=True, exist_ok=True)
    write_json(record, dict(new))


# What dvc.yaml's stages pass (`--config dvc_study_name=... dvc_corpus=...`, from params.yaml):
# the names DVC gives the study's outputs, which must be the study file's own
DVC_NAMES = ("dvc_study_name", "dvc_corpus")


def pop_dvc_names(config: dict[str, Any]) -> dict[str, str]:
    """Take the DVC stages' names of the study out of the config (they are no config keys)."""
    return {key: str(config.pop(key)) for key in DVC_NAMES if key in config}


def check_dvc_names(config: Mapping[str, Any], named: Mapping[str, str], configfile: str) -> None:
    """Refuse, in one line, a DVC stage whose params.yaml names the study's outputs otherwise
    than its config file does (DVC would version folders the run never writes)."""
    own = {
        "dvc_study_name": layout.config_results_key(config),
        "dvc_corpus": config["corpus"]["name"],
    }
    if all(str(own[key]) == value for key, value in named.items()):
        return
    raise ValueError(
        f"params.yaml names the study study_name={named.get('dvc_study_name')}, "
        f"corpus={named.get('dvc_corpus')}, but {configfile} says study_name "
        f"{own['dvc_study_name']}, corpus.name {own['dvc_corpus']}: set params.yaml's "
        f"study_name: {own['dvc_study_name']} and corpus: {own['dvc_corpus']} (dvc.yaml names "
        "the study's outputs by them)"
    )

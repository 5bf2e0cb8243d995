"""Whose results folder it is (leviathan.study.claim): a second config file naming a study
already run is refused in one line; an edit of the study's own file is not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from workflow_helpers import ROOT

from leviathan import layout
from leviathan.cells import config_cells
from leviathan.io import read_json_object
from leviathan.study import claim as study_claim
from leviathan.study.config import resolve


def _config(tmp_path: Path, name: str, **changes: object) -> dict:  # type: ignore[type-arg]
    config = yaml.safe_load((ROOT / layout.DEFAULT_CONFIG).read_text())
    config.update(changes)
    path = tmp_path / "config" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return resolve([path], root=ROOT)


def test_the_first_run_claims_the_folder_and_another_file_is_refused(tmp_path: Path) -> None:
    mine = _config(tmp_path, "mine.yaml", study_name="lr")
    claim = study_claim.claim(
        mine, study_claim.study_file([tmp_path / "config/mine.yaml"], tmp_path)
    )
    assert claim["config"] == "config/mine.yaml"
    study_claim.check_claim(claim, tmp_path)  # nothing recorded yet
    study_claim.record_claim(claim, tmp_path)
    record = tmp_path / layout.study_record("lr")
    assert read_json_object(record)["cells"] == sorted(c.key for c in config_cells(mine))
    # the same file, edited (a study less): the same study, recorded anew when it runs
    edited = {**mine, "studies": {"main": mine["studies"]["main"]}}
    again = study_claim.claim(edited, "config/mine.yaml")
    study_claim.check_claim(again, tmp_path)
    study_claim.record_claim(again, tmp_path)
    assert read_json_object(record)["cells"] == again["cells"] != claim["cells"]
    # another file naming the same study, or the same file on another corpus: refused
    other = study_claim.claim(mine, "config/other.yaml")
    with pytest.raises(ValueError) as refused:
        study_claim.check_claim(other, tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert "hold the study of config/mine.yaml" in message
    assert "give config/other.yaml a study_name of its own" in message
    moved = {**again, "corpus": "mytext"}
    with pytest.raises(ValueError, match="corpus embedded"):
        study_claim.check_claim(moved, tmp_path)


def test_the_study_file_is_the_first_given_relative_to_the_clone(tmp_path: Path) -> None:
    assert study_claim.study_file([], tmp_path) == layout.DEFAULT_CONFIG
    assert study_claim.study_file(["./config/tiny.yaml", "config/overrides.yaml"], tmp_path) == (
        "config/tiny.yaml"
    )
    assert study_claim.study_file([tmp_path / "config/a.yaml"], tmp_path) == "config/a.yaml"
    outside = tmp_path.parent / "elsewhere.yaml"
    assert study_claim.study_file([outside], tmp_path) == str(outside.resolve())


def test_a_config_without_a_study_name_is_its_corpus_s_study(tmp_path: Path) -> None:
    """Unnamed, a study is named after its corpus: a second unnamed file on the corpus of a
    study already run is refused, saying to name it."""
    config = yaml.safe_load((ROOT / layout.DEFAULT_CONFIG).read_text())
    del config["study_name"]
    path = tmp_path / "config" / "unnamed.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    unnamed = resolve([path], root=ROOT)
    assert layout.config_results_key(unnamed) == unnamed["corpus"]["name"]
    study_claim.record_claim(study_claim.claim(unnamed, "config/unnamed.yaml"), tmp_path)
    with pytest.raises(ValueError, match="give config/also.yaml a study_name of its own"):
        study_claim.check_claim(study_claim.claim(unnamed, "config/also.yaml"), tmp_path)


def test_how_tokenize_runs_is_no_part_of_what_the_shards_hold() -> None:
    """The tokenize rule's rerun trigger (`shards`) holds tokenize's settings less threads and
    processes; the script still gets them (`options`)."""
    from leviathan.study.actions import tokenize_content, tokenize_options

    config = resolve([ROOT / "config/paper.yaml"], root=ROOT)
    options = tokenize_options(config, "o200k_base")
    content = tokenize_content(config, "o200k_base")
    assert options["threads"] == 8 and options["processes"] == 4
    assert content == {k: v for k, v in options.items() if k not in ("threads", "processes")}
    assert content["max_bytes"] > 0
    faster = {**config, "tokenize": {**config["tokenize"], "threads": 1, "processes": 16}}
    assert tokenize_content(faster, "o200k_base") == content

"""One corpus dispatch: the workflow's `corpus:` block and `leviathan data fetch`'s arguments go
through the same function (leviathan.data.fetch_dispatch), so the same settings write the same
corpus, and each caller's own defaults hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from leviathan.cli import main
from leviathan.data.corpus import Document
from leviathan.data.fetch_dispatch import fetch_corpus

Texts = Callable[[Path, str], list[str]]


@pytest.fixture
def texts(corpus_documents: Callable[[Path], list[Document]]) -> Texts:
    return lambda corpus, split: [d.text for d in corpus_documents(corpus / f"{split}.jsonl.zst")]


def _rows(path: Path, texts: list[str], field: str = "text", compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({field: t}) + "\n" for t in texts).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    return path


def test_the_config_and_the_command_line_write_the_same_hf_corpus(
    tmp_path: Path, texts: Texts
) -> None:
    rows = _rows(tmp_path / "d.jsonl", [f"row {i} of the set" for i in range(40)], "body")
    config = {
        "kind": "hf",
        "dataset": "json",
        "data_files": [str(rows)],
        "text_field": "body",
        "val_fraction": 0.25,
        "max_docs": 30,
        "train_split": None,
        "val_split": None,
        "part_bytes": None,
    }
    fetch_corpus(config, tmp_path / "from_config")
    args = ["data", "fetch", "hf", "--out", str(tmp_path / "from_cli"), "--dataset", "json"]
    args += ["--data-files", str(rows), "--text-field", "body", "--max-docs", "30"]
    assert main([*args, "--val-fraction", "0.25"]) == 0
    for split in ("train", "val"):
        assert texts(tmp_path / "from_config", split) == texts(tmp_path / "from_cli", split)
    got = texts(tmp_path / "from_config", "train") + texts(tmp_path / "from_config", "val")
    assert sorted(got) == sorted(f"row {i} of the set" for i in range(30))
    assert 0 < len(texts(tmp_path / "from_config", "val")) < 15


def test_a_configured_val_split_is_read_not_hash_split(tmp_path: Path, texts: Texts) -> None:
    rows = _rows(tmp_path / "d.jsonl", [f"row {i}" for i in range(8)])
    config = {"kind": "hf", "dataset": "json", "data_files": [str(rows)], "val_fraction": 0.5}
    fetch_corpus({**config, "train_split": "train", "val_split": "train"}, tmp_path / "c")
    assert (
        texts(tmp_path / "c", "train")
        == texts(tmp_path / "c", "val")
        == [f"row {i}" for i in range(8)]
    )


def test_pile_val_limits_are_the_trains_unless_given(tmp_path: Path, texts: Texts) -> None:
    root = tmp_path / "pile"
    _rows(root / "train" / "00.jsonl.zst", [f"t doc {i}" for i in range(6)], compress=True)
    _rows(root / "val.jsonl.zst", [f"val doc {i}" for i in range(4)], compress=True)
    config = {"kind": "pile", "local_dir": str(root), "max_docs": 2}
    fetch_corpus(config, tmp_path / "config")  # the workflow's: one limit for both splits
    assert texts(tmp_path / "config", "val") == ["val doc 0", "val doc 1"]
    args = ["data", "fetch", "pile", "--out", str(tmp_path / "cli"), "--local-dir", str(root)]
    assert main([*args, "--max-docs", "2"]) == 0  # the command line's: --val-max-docs apart
    assert texts(tmp_path / "cli", "train") == ["t doc 0", "t doc 1"]
    assert texts(tmp_path / "cli", "val") == [f"val doc {i}" for i in range(4)]


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ({"kind": "text", "paths": []}, "corpus.kind=text needs corpus.paths"),
        ({"kind": "hf", "dataset": None}, "corpus.kind=hf needs corpus.dataset"),
        ({"kind": "web"}, "corpus.kind='web': use embedded, text, hf, pile"),
    ],
)
def test_incomplete_settings_are_one_line_errors(
    tmp_path: Path, corpus: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as e:
        fetch_corpus(corpus, tmp_path / "c")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "c").exists()

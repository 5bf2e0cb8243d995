"""Sources: local text/globs, HF `datasets` streaming on local files, The Pile (local + HF)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest
import zstandard

from leviathan.data.corpus import CorpusError, Document
from leviathan.data.fetch import fetch_hf, fetch_pile, fetch_text
from leviathan.data.sources import HFSpec, HubUnreachableError, hf_documents
from leviathan.io import sha256_file
from leviathan.manifest import read_manifest


def _jsonl(path: Path, texts: list[str], compress: bool = False, **extra: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({"text": t, **extra}) + "\n" for t in texts).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    return path


Texts = Callable[[Path, str], list[str]]


@pytest.fixture
def texts(corpus_documents: Callable[[Path], list[Document]]) -> Texts:
    """The texts of one split of a corpus directory, read by the reference reader."""
    return lambda corpus, split: [d.text for d in corpus_documents(corpus / f"{split}.jsonl.zst")]


def test_fetch_text_files_globs_and_bad_bytes(tmp_path: Path, texts: Texts) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(30):
        (src / "sub" / f"f{i:02d}.txt").write_text(f"plain file {i}\n")
    (src / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    _jsonl(src / "lines.jsonl.zst", [f"json line {i}" for i in range(10)], compress=True)
    (src / "raw.jsonl").write_bytes(b'{"text": "bad \xff byte"}\n')
    out = tmp_path / "corpus"
    manifests = fetch_text(out, [str(src / "**" / "*.txt"), str(src / "*.jsonl*")], 0.2)
    got = texts(out, "train") + texts(out, "val")
    assert len(got) == 42
    assert "caf\ufffd cr\ufffdme" in got
    assert "json line 3" in got
    assert "bad \ufffd byte" in got
    assert sum(m["replaced_chars"] for m in manifests.values()) == 3
    m = manifests["train"]
    assert len(m["inputs"]) == 33
    assert m["source"]["kind"] == "text"
    assert m["inputs"][0]["sha256"] == sha256_file(m["inputs"][0]["path"])


def test_fetch_text_errors(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nothing\*\.txt: matches no file"):
        fetch_text(tmp_path / "out", [str(tmp_path / "nothing*.txt")])
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(CorpusError, match="no non-empty documents"):
        fetch_text(tmp_path / "out", [str(tmp_path / "empty.txt")])
    _jsonl(tmp_path / "x.jsonl", ["a"], body="b")
    with pytest.raises(CorpusError, match=r"x\.jsonl:1: no field 'content'.*--text-field"):
        fetch_text(tmp_path / "out", [str(tmp_path / "x.jsonl")], text_field="content")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"text": null}', "field 'text' is null (a JSON null), not a string"),
        ('{"text": 123}', "field 'text' is 123 (a JSON number), not a string"),
        ('{"text": ["a", "b"]}', 'field \'text\' is ["a", "b"] (a JSON array), not a string'),
        ('{"text": {"a": 1}}', "(a JSON object), not a string"),
        ('{"text": true}', "(a JSON boolean), not a string"),
        ('["text"]', "a JSON list, not an object with a text field"),
    ],
)
def test_a_text_field_that_is_no_string_is_refused_at_its_line(
    tmp_path: Path, line: str, message: str
) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "fine"}\n\n' + line + "\n")
    with pytest.raises(CorpusError) as e:
        fetch_text(tmp_path / "out", [str(src)])
    assert str(e.value).startswith(f"{src}:3: ")
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_hf_streaming_json_with_split_mapping(tmp_path: Path, texts: Texts) -> None:
    train = _jsonl(tmp_path / "train.jsonl", [f"train row {i}" for i in range(12)])
    spec = HFSpec(dataset="json", split="train", data_files=(str(train),))
    out = tmp_path / "corpus"
    manifests = fetch_hf(out, {"test": spec}, limits=(5, None))
    assert texts(out, "test") == [f"train row {i}" for i in range(5)]
    src = manifests["test"]["source"]["splits"]["test"]
    assert src["dataset"] == "json"
    assert src["limits"]["max_docs"] == 5
    assert src["commit_sha"] is None
    assert manifests["test"]["inputs"][0]["path"].endswith("train.jsonl")


def test_hf_streaming_text_builder_hash_split(tmp_path: Path, texts: Texts) -> None:
    lines = tmp_path / "wiki.txt"
    lines.write_text("".join(f"line {i} of text\n" for i in range(60)))
    spec = HFSpec(dataset="text", split="train", data_files=(str(lines),))
    out = tmp_path / "corpus"
    fetch_hf(out, {"train": spec}, val_fraction=0.25)
    got = texts(out, "train") + texts(out, "val")
    assert sorted(got) == sorted(f"line {i} of text" for i in range(60))
    assert 0 < len(texts(out, "val")) < 30


def _pile_dir(root: Path) -> Path:
    _jsonl(root / "train" / "00.jsonl.zst", [f"t0 doc {i}" for i in range(6)], True, meta="m")
    _jsonl(root / "train" / "01.jsonl.zst", [f"t1 doc {i}" for i in range(6)], True)
    _jsonl(root / "val.jsonl.zst", [f"val doc {i}" for i in range(4)], True)
    return root


def test_pile_local_dir_with_limits(
    tmp_path: Path, texts: Texts, corpus_documents: Callable[[Path], list[Document]]
) -> None:
    root = _pile_dir(tmp_path / "pile")
    out = tmp_path / "corpus"
    manifests = fetch_pile(out, local_dir=root, train_limits=(None, 20), val_limits=(2, None))
    assert texts(out, "train") == [f"t0 doc {i}" for i in range(3)]
    assert texts(out, "val") == ["val doc 0", "val doc 1"]
    ids = [d.id for d in corpus_documents(out / "train.jsonl.zst")]
    assert ids == ["train/00.jsonl.zst:1", "train/00.jsonl.zst:2", "train/00.jsonl.zst:3"]
    inputs = [Path(i["path"]).name for i in manifests["train"]["inputs"]]
    assert inputs == ["00.jsonl.zst", "val.jsonl.zst"]  # only the files actually read
    assert manifests["val"]["source"]["limits"]["val"]["max_docs"] == 2


def test_pile_through_datasets_streaming(tmp_path: Path, texts: Texts) -> None:
    """The Hub code path, pointed at a local folder laid out like a dataset repo."""
    root = tmp_path / "pile_repo"
    _jsonl(root / "train" / "00.jsonl.zst", [f"t doc {i}" for i in range(5)], True)
    _jsonl(root / "validation" / "val.jsonl.zst", [f"v doc {i}" for i in range(3)], True)
    out = tmp_path / "corpus"
    manifests = fetch_pile(out, dataset=str(root))
    assert texts(out, "train") == [f"t doc {i}" for i in range(5)]
    assert texts(out, "val") == [f"v doc {i}" for i in range(3)]
    src = manifests["val"]["source"]
    assert src["kind"] == "pile-hf"
    assert src["splits"]["val"]["split"] == "validation"
    with pytest.raises(CorpusError, match="split names"):
        fetch_pile(tmp_path / "c2", dataset=str(root), val_split="test")


def test_unreachable_hub_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubUnreachableError) as err:
        next(hf_documents(HFSpec(dataset="monology/pile-uncopyrighted", split="train")))
    msg = str(err.value)
    assert "monology/pile-uncopyrighted" in msg
    assert all(k in msg for k in ("HF_ENDPOINT", "--local-dir", "HF_DATASETS_OFFLINE=1"))
    assert isinstance(err.value, ValueError)  # the CLI reports it without a traceback


@pytest.mark.slow
def test_unreachable_hub_real_network() -> None:
    """No offline switch: a real connection failure, whether or not this machine reaches the Hub.

    The Hub is made unreachable for one subprocess (HF_ENDPOINT on a closed loopback port, set
    before huggingface_hub reads it at import), so the real DNS/connect/retry path runs.
    """
    code = (
        "from leviathan.data.sources import HFSpec, HubUnreachableError, hf_documents\n"
        "try:\n"
        "    next(hf_documents(HFSpec(dataset='monology/pile-uncopyrighted', split='train')))\n"
        "except HubUnreachableError as exc:\n"
        "    print('UNREACHABLE', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": tempfile.mkdtemp(prefix="hf-home-")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert "UNREACHABLE" in out.stdout, out.stdout + out.stderr
    assert "could not reach the Hugging Face Hub" in out.stdout


def test_manifest_of_hf_corpus_is_readable(tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "d.jsonl", ["x", "y", "z"])
    fetch_hf(tmp_path / "c", {"train": HFSpec("json", "train", data_files=(str(data),))})
    assert read_manifest(tmp_path / "c" / "train.jsonl.zst")["documents"] == 3

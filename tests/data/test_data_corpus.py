"""Corpus format, cleaning, hash splits, limits, the embedded corpus, atomic writes."""

from __future__ import annotations

import datetime as dt
import json
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard

from leviathan import provenance
from leviathan.data.corpus import (
    CorpusError,
    Document,
    clean_text,
    corpus_splits,
    decode_bytes,
    hash_fraction,
    hash_split,
    limit,
    write_corpus,
)
from leviathan.data.embedded import embedded_documents, module_text, stdlib_files
from leviathan.data.jsonl import jsonl_lines
from leviathan.io import sha256_file
from leviathan.layout import manifest_path
from leviathan.manifest import read_manifest, recorded_sha256, write_manifest

DOCS = [Document(f"doc{i}", f"text number {i} " * (i + 1)) for i in range(200)]


def test_hash_fraction_is_stable_and_uniformish() -> None:
    # sha256-based, so fixed across processes, machines and Python versions
    assert hash_fraction("doc0") == pytest.approx(int("0x" + "f91335dfc8fb4817", 16) / 2**64)
    fractions = [hash_fraction(d.id) for d in DOCS]
    assert 0.3 < sum(f < 0.5 for f in fractions) / len(fractions) < 0.7


def test_hash_split_depends_on_id_not_position() -> None:
    forward = dict((d.id, s) for s, d in hash_split(DOCS, 0.2))
    backward = dict((d.id, s) for s, d in hash_split(reversed(DOCS), 0.2))
    assert forward == backward
    assert {"train", "val"} == set(forward.values())
    with pytest.raises(ValueError, match="val_fraction=1.5"):
        list(hash_split(DOCS, 1.5))


def test_limit_by_docs_and_bytes() -> None:
    assert len(list(limit(DOCS, max_docs=3))) == 3
    kept = list(limit(DOCS, max_bytes=100))
    sizes = [len(d.text.encode()) for d in kept]
    assert sum(sizes[:-1]) < 100 <= sum(sizes)


def test_decode_and_clean_count_replacements() -> None:
    assert clean_text(decode_bytes("plain é".encode())) == ("plain é", 0)
    assert clean_text(decode_bytes(b"ok \xff\xfe end")) == ("ok \ufffd\ufffd end", 2)
    assert clean_text("a\ud800b") == ("a\ufffdb", 1)


ReadCorpus = Callable[[Path], list[Document]]


def test_write_and_read_roundtrip(tmp_path: Path, corpus_documents: ReadCorpus) -> None:
    docs = [*DOCS[:20], Document("empty", "   "), Document("bad", "x\udcff y")]
    manifests = write_corpus(
        tmp_path, hash_split(docs, 0.3), splits=("train", "val"), source={"kind": "test"}
    )
    assert corpus_splits(tmp_path) == ["train", "val"]
    back = {
        d.id: d.text
        for s in ("train", "val")
        for d in corpus_documents(tmp_path / f"{s}.jsonl.zst")
    }
    assert back["bad"] == "x\ufffd y"
    assert "empty" not in back
    assert {k: v for k, v in back.items() if k != "bad"} == {d.id: d.text for d in DOCS[:20]}
    total = {
        k: sum(m[k] for m in manifests.values())
        for k in ("documents", "replaced_chars", "empty_skipped")
    }
    assert total == {"documents": 21, "replaced_chars": 1, "empty_skipped": 1}
    m = read_manifest(tmp_path / "train.jsonl.zst", artifact_type="corpus")
    assert m["artifact"]["sha256"] == sha256_file(tmp_path / "train.jsonl.zst")
    assert m["source"] == {"kind": "test"}
    assert m["split"] == "train"


def test_empty_corpus_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    out = tmp_path / "c"
    with pytest.raises(CorpusError, match="no non-empty documents"):
        write_corpus(
            out,
            hash_split([Document("a", "")], 0.5),
            splits=("train", "val"),
            source={"kind": "test"},
        )
    with pytest.raises(CorpusError, match=r"split\(s\) val .* would be empty"):
        write_corpus(
            out, (("train", d) for d in DOCS[:3]), splits=("train", "val"), source={"kind": "test"}
        )
    assert list(out.iterdir()) == []


def test_interrupted_write_leaves_nothing(tmp_path: Path) -> None:
    def docs() -> Iterator[tuple[str, Document]]:
        yield from (("train", d) for d in DOCS[:5])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_corpus(tmp_path, docs(), splits=("train",), source={"kind": "test"})
    assert list(tmp_path.iterdir()) == []


def test_jsonl_lines_reads_plain_and_every_zstd_frame(tmp_path: Path) -> None:
    data = b'{"id": "a", "text": "one"}\n\n{"id": "b", "text": "two \\u2028"}\n'
    expected = data.splitlines(keepends=True)  # the blank line included, for line numbers
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(data)
    assert list(jsonl_lines(plain)) == expected
    frames = tmp_path / "frames.jsonl.zst"  # two frames, the cut inside a line (as parts are)
    frames.write_bytes(
        b"".join(zstandard.ZstdCompressor().compress(x) for x in (data[:9], data[9:]))
    )
    assert list(jsonl_lines(frames)) == expected
    zstd_suffix = tmp_path / "one.jsonl.zstd"
    zstd_suffix.write_bytes(zstandard.ZstdCompressor().compress(data))
    assert list(jsonl_lines(zstd_suffix)) == expected


def test_embedded_corpus(embedded_corpus: Path, corpus_documents: ReadCorpus) -> None:
    manifests = {s: read_manifest(embedded_corpus / f"{s}.jsonl.zst") for s in ("train", "val")}
    total = sum(m["text_bytes"] for m in manifests.values())
    assert 2e6 < total < 8e6  # "about 4 MB"
    assert all(m["documents"] > 10 for m in manifests.values())
    assert manifests["train"]["source"]["kind"] == "embedded"
    assert manifests["train"]["source"]["python_version"]
    val_ids = [d.id for d in corpus_documents(embedded_corpus / "val.jsonl.zst")]
    assert all(hash_fraction(i) < 0.05 for i in val_ids)
    train = corpus_documents(embedded_corpus / "train.jsonl.zst")
    assert all(hash_fraction(d.id) >= 0.05 for d in train)
    assert [d.id for d in train] == sorted((d.id for d in train), key=_embedded_order)
    assert any(d.id.startswith("pydoc_data/topics/") for d in train)
    assert sum(d.text.count(" the ") for d in train) > 10_000  # English prose


def _embedded_order(doc_id: str) -> tuple[int, str]:
    return (doc_id.startswith("pydoc_data/"), doc_id)


def test_embedded_is_deterministic_and_parallel_safe() -> None:
    root = Path(sysconfig.get_paths()["stdlib"]) / "email"
    serial = list(embedded_documents(root, workers=1))
    parallel = list(embedded_documents(root, workers=2))
    assert serial == parallel
    assert len(serial) > 10
    files = stdlib_files(root)
    assert files == sorted(files)
    assert not any("test" in p.parts for p in files)


def test_module_text_extracts_docstrings_and_comments(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        '#!/usr/bin/env python\n"""Module doc."""\n\n# first line\n# second line\n'
        'def f():\n    """Function doc."""\n    return 1  # trailing\n'
    )
    assert module_text(src) == "Module doc.\n\nfirst line\nsecond line\n\nFunction doc.\n\ntrailing"
    (tmp_path / "bad.py").write_text("def (:\n")
    assert module_text(tmp_path / "bad.py") == ""


def test_manifest_path_rule(tmp_path: Path) -> None:
    assert manifest_path(tmp_path / "train.bin") == tmp_path / "train.bin.json"
    with pytest.raises(FileNotFoundError, match="no manifest"):
        read_manifest(tmp_path / "train.bin")
    (tmp_path / "x.bin").write_bytes(b"")
    (tmp_path / "x.bin.json").write_text(json.dumps({"kind": "counts"}))
    with pytest.raises(ValueError, match="expected 'tokens'"):
        read_manifest(tmp_path / "x.bin", artifact_type="tokens")


def test_manifest_carries_provenance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    art = tmp_path / "x.bin"
    art.write_bytes(b"abc")
    started = provenance.utc_now() - dt.timedelta(seconds=5)
    config = {"b": [1, 2], "a": {"y": 1, "x": None}}
    m = write_manifest(art, artifact_type="tokens", config=config, started=started, device="cpu")
    assert read_manifest(art) == m
    assert m["artifact"]["sha256"] == sha256_file(art)
    assert m["artifact"]["path"] == str(art)
    assert m["code"].keys() == {"leviathan", "git_commit", "git_dirty", "git_diff"}
    env = m["env"]
    assert env["slurm_job_id"] == "4242"
    assert env["device"] == "cpu"
    assert {"python", "torch", "cuda", "host"} <= env.keys()
    assert set(provenance.PACKAGES) <= env["packages"].keys()
    assert env["packages"]["numpy"]
    assert env["packages"]["torch"]  # installed here
    assert m["config"] == config
    assert m["config_sha256"] == provenance.config_sha256({"a": {"x": None, "y": 1}, "b": [1, 2]})
    t0, t1 = (dt.datetime.fromisoformat(m[k]) for k in ("started_utc", "finished_utc"))
    assert t1.tzinfo is not None
    assert t0 <= t1
    assert (t1 - t0).total_seconds() >= 4
    assert m["created_utc"] == m["finished_utc"]
    with pytest.raises(ValueError, match="reserved"):
        write_manifest(art, artifact_type="tokens", fields={"finished_utc": "x"})


def test_manifest_without_config_or_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    art = tmp_path / "x.bin"
    art.write_bytes(b"abc")
    m = write_manifest(art, artifact_type="tokens")
    assert "config" not in m
    assert "config_sha256" not in m
    assert m["started_utc"] is None
    assert m["finished_utc"]
    assert m["env"]["slurm_job_id"] is None


def test_config_sha256_is_canonical() -> None:
    a = {"lr": 0.003, "betas": [0.9, 0.999], "model": {"d": 64, "h": 4}}
    b = {"model": {"h": 4, "d": 64}, "betas": [0.9, 0.999], "lr": 0.003}
    assert provenance.config_sha256(a) == provenance.config_sha256(b)
    assert provenance.canonical_json(b) == '{"betas":[0.9,0.999],"lr":0.003,"model":{"d":64,"h":4}}'
    assert provenance.config_sha256(a) != provenance.config_sha256({**a, "lr": 0.001})
    assert provenance.config_sha256({"betas": (0.9, 0.999)}) == provenance.config_sha256(
        {"betas": [0.9, 0.999]}
    )


def test_recorded_path_and_recorded_sha256(tmp_path: Path) -> None:
    tmp, final = tmp_path / ".final.tmp", tmp_path / "final"
    tmp.mkdir()
    (tmp / "w.bin").write_bytes(b"weights")
    m = write_manifest(tmp / "w.bin", artifact_type="checkpoint", recorded_path=final / "w.bin")
    assert (tmp / "w.bin.json").is_file()  # written where the artifact is now
    assert m["artifact"]["path"] == str(final / "w.bin")
    assert m["artifact"]["name"] == "w.bin"
    tmp.rename(final)
    assert recorded_sha256(final / "w.bin") == sha256_file(final / "w.bin")
    # the manifest's hash is used as recorded (not re-read); without one (or of another kind) it is computed
    doctored = {**m, "artifact": {**m["artifact"], "sha256": "f" * 64}}
    (final / "w.bin.json").write_text(json.dumps(doctored))
    assert recorded_sha256(final / "w.bin") == "f" * 64
    assert recorded_sha256(final / "w.bin", artifact_type="tokens") == sha256_file(final / "w.bin")
    (final / "w.bin.json").unlink()
    assert recorded_sha256(final / "w.bin") == sha256_file(final / "w.bin")


def test_fetch_manifests_record_config_and_start(tmp_path: Path) -> None:
    from leviathan.data.fetch import fetch_text

    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"{i}.txt").write_text(f"document {i} " * 20)
    before = provenance.utc_now().replace(microsecond=0)
    manifests = fetch_text(tmp_path / "out", [str(src)], val_fraction=0.3, limits=(None, None))
    for m in manifests.values():
        assert m["config"] == {
            "step": "fetch",
            "source": "text",
            "patterns": [str(src)],
            "val_fraction": 0.3,
            "text_field": "text",
            "limits": {"max_docs": None, "max_bytes": None},
        }
        assert m["config_sha256"] == provenance.config_sha256(m["config"])
        started = dt.datetime.fromisoformat(m["started_utc"])
        assert before <= started <= dt.datetime.fromisoformat(m["finished_utc"])
    assert manifests["train"]["started_utc"] == manifests["val"]["started_utc"]  # one step

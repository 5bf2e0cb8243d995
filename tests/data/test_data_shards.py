"""Token shards and counts on the embedded corpus: content, manifests, errors, atomicity."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zstandard

from leviathan.data.corpus import CorpusError, Document
from leviathan.data.counts import count_shard, counts_from_shard, load_counts
from leviathan.data.prepare import tokenize_corpus
from leviathan.data.shards import FileTokens, ShardError, open_shard
from leviathan.data.tokenizers import load_tokenizer
from leviathan.io import sha256_file
from leviathan.layout import manifest_path
from leviathan.manifest import read_manifest


def test_o200k_shards_match_the_corpus(
    embedded_corpus: Path, o200k_shards: Path, corpus_documents: Callable[[Path], list[Document]]
) -> None:
    tok = load_tokenizer("o200k_base")
    for split in ("train", "val"):
        shard = open_shard(o200k_shards / f"{split}.bin", vocab="o200k_base", verify_sha256=True)
        m = shard.manifest
        docs = corpus_documents(embedded_corpus / f"{split}.jsonl.zst")
        assert shard.tokens.dtype == np.uint32
        assert m["dtype"] == "uint32"
        assert m["documents"] == len(docs) == int((shard.tokens == tok.spec.eot_id).sum())
        assert m["vocab"] == {
            "name": "o200k_base",
            "encoding": "o200k_base",
            "n_vocab": 200019,
            "eot_id": 199999,
            "bpe_file": "o200k_base.tiktoken",
            "bpe_sha256": tok.spec.bpe_sha256,
        }
        assert m["source_manifest"] == read_manifest(embedded_corpus / f"{split}.jsonl.zst")
        assert m["inputs"][0]["sha256"] == sha256_file(embedded_corpus / f"{split}.jsonl.zst")
        assert m["text_bytes"] == sum(len(d.text.encode()) for d in docs)
        # the first and last documents decode back exactly, EOT after each
        first = tok.encode(docs[0].text)
        assert shard.tokens[: len(first) + 1].tolist() == [*first, tok.spec.eot_id]
        last = tok.encode(docs[-1].text)
        assert shard.tokens[-len(last) - 1 :].tolist() == [*last, tok.spec.eot_id]


def test_counts_in_pass_equal_counts_from_shard(o200k_shards: Path, tmp_path: Path) -> None:
    counts = load_counts(o200k_shards / "counts.npy", vocab="o200k_base")
    shard = open_shard(o200k_shards / "train.bin")
    assert counts.dtype == np.int64
    assert counts.shape == (200019,)
    assert counts.sum() == len(shard)
    assert counts[199999] == shard.manifest["documents"]
    np.testing.assert_array_equal(counts, count_shard(shard))
    m = counts_from_shard(o200k_shards / "train.bin", tmp_path / "c.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), counts)
    assert m["inputs"][0]["sha256"] == shard.sha256
    assert m["total"] == len(shard)
    assert read_manifest(o200k_shards / "counts.npy")["vocab"]["name"] == "o200k_base"


def test_token_and_count_manifests_chain_to_the_corpus(
    embedded_corpus: Path, o200k_shards: Path
) -> None:
    import datetime as dt

    from leviathan.provenance import config_sha256

    corpus = read_manifest(embedded_corpus / "train.jsonl.zst")
    tokens = read_manifest(o200k_shards / "train.bin")
    counts = read_manifest(o200k_shards / "counts.npy")
    assert tokens["inputs"] == [
        {"path": corpus["artifact"]["path"], "sha256": corpus["artifact"]["sha256"]}
    ]
    assert counts["inputs"][0]["sha256"] == tokens["artifact"]["sha256"]
    assert tokens["vocab"]["bpe_sha256"]
    assert counts["vocab"] == tokens["vocab"]
    assert tokens["config"]["step"] == "tokenize"
    assert tokens["config"]["vocab"] == "o200k_base"
    assert tokens["config"]["split"] == "train"
    assert counts["config"]["step"] == "counts"
    for m in (corpus, tokens, counts):
        assert m["config_sha256"] == config_sha256(m["config"])
        assert m["code"]["git_commit"] is None or len(m["code"]["git_commit"]) == 40
        assert "packages" in m["env"]
        assert "slurm_job_id" in m["env"]
        assert dt.datetime.fromisoformat(m["started_utc"]) <= dt.datetime.fromisoformat(
            m["finished_utc"]
        )
    # the counts were made in the train shard's tokenize pass: the same start
    assert counts["started_utc"] == tokens["started_utc"]
    assert corpus["finished_utc"] <= tokens["started_utc"]


def test_gpt2_uses_uint16(gpt2_shards: Path) -> None:
    shard = open_shard(gpt2_shards / "train.bin", vocab="gpt2")
    assert shard.tokens.dtype == np.uint16
    assert shard.tokens.max() == 50256
    assert (gpt2_shards / "train.bin").stat().st_size == 2 * len(shard)


def test_process_pool_gives_identical_shards(
    embedded_corpus: Path, o200k_shards: Path, tmp_path: Path
) -> None:
    tokenize_corpus(
        embedded_corpus,
        "o200k_base",
        tmp_path,
        splits=["val"],
        threads=1,
        processes=2,
        batch_bytes=20_000,
        progress=False,
    )
    assert sha256_file(tmp_path / "val.bin") == sha256_file(o200k_shards / "val.bin")
    assert not (tmp_path / "counts.npy").exists()  # counts come from train only


def _copy(src_dir: Path, dst_dir: Path, name: str = "val.bin") -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(src_dir / name, dst_dir / name)
    shutil.copy(manifest_path(src_dir / name), manifest_path(dst_dir / name))
    return dst_dir / name


def _fetched_as_is(corpus_file: Path) -> None:
    """Record a corpus file as it is now in its manifest, as a fetch of that text would."""
    manifest = read_manifest(corpus_file)
    manifest["artifact"].update(sha256=sha256_file(corpus_file), bytes=corpus_file.stat().st_size)
    manifest_path(corpus_file).write_text(json.dumps(manifest))


def test_a_corpus_changed_since_its_fetch_is_refused(embedded_corpus: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    _copy(embedded_corpus, corpus, "val.jsonl.zst")
    text = zstandard.ZstdDecompressor().decompress(
        (corpus / "val.jsonl.zst").read_bytes(), max_output_size=1 << 30
    )
    edited = text.replace(b"the", b"teh", 1)
    (corpus / "val.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(edited))
    with pytest.raises(CorpusError, match=r"val\.jsonl\.zst: sha256 .* its manifest .* refetch"):
        tokenize_corpus(corpus, "gpt2", tmp_path / "tok", processes=1, progress=False)
    assert not (tmp_path / "tok" / "val.bin").exists()


def test_truncated_bin_is_refused(o200k_shards: Path, tmp_path: Path) -> None:
    bad = _copy(o200k_shards, tmp_path)
    with open(bad, "r+b") as fh:
        fh.truncate(bad.stat().st_size - 4)
    with pytest.raises(ShardError, match=r"val\.bin: \d+ bytes, but its manifest says"):
        open_shard(bad)
    with open(bad, "r+b") as fh:  # not even a whole number of uint32 tokens
        fh.truncate(bad.stat().st_size - 1)
    with pytest.raises(ShardError, match="truncated"):
        open_shard(bad)


def test_manifest_dtype_and_vocab_mismatch(o200k_shards: Path, tmp_path: Path) -> None:
    bad = _copy(o200k_shards, tmp_path)
    m = json.loads(manifest_path(bad).read_text())
    m["dtype"] = "uint16"
    manifest_path(bad).write_text(json.dumps(m))
    with pytest.raises(ShardError, match="dtype uint16 cannot be right for vocabulary o200k_base"):
        open_shard(bad)
    good = _copy(o200k_shards, tmp_path / "g")
    with pytest.raises(ShardError, match="tokenized with o200k_base, not gpt2"):
        open_shard(good, vocab="gpt2")


def test_changed_content_fails_sha_check(o200k_shards: Path, tmp_path: Path) -> None:
    bad = _copy(o200k_shards, tmp_path)
    with open(bad, "r+b") as fh:
        fh.write(b"\x00\x00\x00\x00")
    with pytest.raises(ShardError, match="sampled blocks differ"):
        open_shard(bad)  # size checks pass; the sampled fingerprint (first block) does not


def test_missing_manifest_or_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="leviathan data tokenize"):
        open_shard(tmp_path / "train.bin")
    (tmp_path / "train.bin").write_bytes(b"\x00" * 8)
    with pytest.raises(FileNotFoundError, match="did not finish; rerun it"):
        open_shard(tmp_path / "train.bin")


def test_bad_corpus_line_leaves_no_bin(embedded_corpus: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    _copy(embedded_corpus, corpus, "val.jsonl.zst")
    good = zstandard.ZstdDecompressor().decompress(
        (corpus / "val.jsonl.zst").read_bytes(), max_output_size=1 << 30
    )
    (corpus / "val.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(good + b"{oops\n"))
    _fetched_as_is(corpus / "val.jsonl.zst")  # a source that held the bad line
    out = tmp_path / "tok"
    with pytest.raises(CorpusError, match=r"val\.jsonl\.zst: malformed line b'\{oops.*re-run"):
        tokenize_corpus(corpus, "o200k_base", out, progress=False)
    assert not out.exists() or list(out.iterdir()) == []
    with pytest.raises(CorpusError, match="malformed line"):  # same through worker processes
        tokenize_corpus(corpus, "o200k_base", out, processes=2, threads=1, progress=False)
    assert not out.exists() or list(out.iterdir()) == []


def test_tokenize_errors_name_the_fix(embedded_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown vocabulary 'o300k'"):
        tokenize_corpus(embedded_corpus, "o300k", tmp_path)
    with pytest.raises(CorpusError, match=r"split\(s\) \['test'\] not found.*leviathan data fetch"):
        tokenize_corpus(embedded_corpus, "gpt2", tmp_path, splits=["test"])
    with pytest.raises(CorpusError, match="corpus directory not found"):
        tokenize_corpus(tmp_path / "missing", "gpt2", tmp_path)


def test_failed_rerun_keeps_the_previous_complete_pair(
    embedded_corpus: Path, tmp_path: Path
) -> None:
    corpus, out = tmp_path / "corpus", tmp_path / "tok"
    _copy(embedded_corpus, corpus, "val.jsonl.zst")
    tokenize_corpus(corpus, "gpt2", out, processes=1, progress=False)
    before = sha256_file(out / "val.bin")
    (corpus / "val.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"[1]\n"))
    _fetched_as_is(corpus / "val.jsonl.zst")
    with pytest.raises(CorpusError):
        tokenize_corpus(corpus, "gpt2", out, processes=1, progress=False)
    assert open_shard(out / "val.bin", verify_sha256=True).sha256 == before
    assert sorted(p.name for p in out.iterdir()) == ["val.bin", "val.bin.json"]


def test_a_pass_over_a_shard_file_keeps_no_pages_resident(
    tmp_path: Path, resident_file_kb: Callable[[], int]
) -> None:
    """Reading a shard slice by slice from its file (what counts and word counts do) leaves its
    pages in the page cache, not in the process's resident memory; a memory map of the same pass keeps
    every page it touched (64 MB here, the whole shard at the study's size)."""
    path = tmp_path / "tokens.bin"
    n = 32 << 20  # uint16 tokens: 64 MB
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, size=n, dtype=np.uint16).tofile(path)

    def grown_kb(tokens: object) -> int:
        before = resident_file_kb()
        total = 0
        for start in range(0, n, 1 << 20):
            total += int(np.asarray(tokens[start : start + (1 << 20)]).sum())  # type: ignore[index]
        assert total > 0
        return resident_file_kb() - before

    streamed = FileTokens(path, np.dtype(np.uint16), n)
    from_file = grown_kb(streamed)
    mapped = np.memmap(path, dtype=np.uint16, mode="r")
    from_map = grown_kb(mapped)
    np.testing.assert_array_equal(streamed[n - 1000 : n + 5], mapped[n - 1000 :])  # same tokens
    assert from_map > 48 << 10  # the map: most of the 64 MB resident
    assert from_file < 8 << 10  # the file: about nothing


# A tokenize of the val split that stalls once its temporary shard is open (the encoder is
# the only part replaced), so that the parent can SIGKILL it mid-write.
STALLED_TOKENIZE = """
import sys, time
import leviathan.data.shards as shards
shards.encode_file = lambda *args, **kwargs: time.sleep(600)
from leviathan.data.tokenizers import load_tokenizer
shards.tokenize_split(sys.argv[1], "val", load_tokenizer("gpt2"), sys.argv[2], progress=False)
"""


def test_a_killed_tokenize_leaves_no_temporary_shard_after_a_rerun(
    embedded_corpus: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from leviathan.data.shards import tokenize_split

    out = tmp_path / "tok"
    child = subprocess.Popen(
        [sys.executable, "-c", STALLED_TOKENIZE, str(embedded_corpus), str(out)]
    )
    temp = out / f".val.bin.{child.pid}.tmp"
    deadline = time.monotonic() + 60
    while not temp.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert temp.exists(), "the tokenize never opened its temporary shard"
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert temp.exists()  # what a SIGKILL leaves: atomic_path's cleanup never ran
    tokenize_split(embedded_corpus, "val", load_tokenizer("gpt2"), out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["val.bin", "val.bin.json"]
    assert len(open_shard(out / "val.bin")) > 0


def test_a_record_of_a_shard_names_the_check_that_was_made(
    make_shard: Callable[..., Path], tmp_path: Path
) -> None:
    """A shard opened with its sampled fingerprint is recorded with the manifest's sha256 and
    says so (how many of its bytes were read), never as if the whole file had been hashed."""
    from leviathan.data.shards import (
        FINGERPRINT_BLOCK_BYTES,
        FINGERPRINT_BLOCKS,
        sampled_fingerprint,
    )
    from leviathan.manifest import vocab_record, write_manifest
    from leviathan.vocab import get_vocab

    tokens = np.random.default_rng(0).integers(0, 50_000, 3_000_000)  # 6 MB of uint16
    path = make_shard(tmp_path / "train.bin", tokens)
    assert open_shard(path).check == "size"  # a manifest without a fingerprint
    fields = {"split": "train", "dtype": "uint16", "tokens": len(tokens), "documents": 1}
    fields["fingerprint"] = sampled_fingerprint(path)  # as tokenize records it
    write_manifest(
        path, artifact_type="tokens", vocab=vocab_record(get_vocab("gpt2")), fields=fields
    )
    size = path.stat().st_size
    sampled = FINGERPRINT_BLOCKS * FINGERPRINT_BLOCK_BYTES
    assert size > sampled  # the sample is a part of the file
    shard = open_shard(path)
    assert shard.check == f"size + sampled fingerprint ({sampled} of {size} bytes read)"
    assert open_shard(path, verify_sha256=True).check == "full sha256"
    record = counts_from_shard(path, tmp_path / "c.npy")["inputs"][0]
    assert record["check"] == shard.check
    assert record["sha256"] == sha256_file(path)

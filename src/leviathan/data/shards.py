"""Token shards: a corpus split tokenized into one flat `.bin` of ids plus its manifest.

Layout: ids of document 1, EOT, ids of document 2, EOT, ... as little-endian uint16 when
the vocabulary fits (gpt2) else uint32. The manifest (kind "tokens") records dtype, token
and document counts, the vocabulary, the source corpus manifest and the `.bin`'s sha256.

Encoding runs in `leviathan.data.encode` (threads and processes, bounded memory); this
module appends its batches to a temp file, hashing and counting as it goes, renames the
file into place only once complete, and then writes the manifest.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from leviathan.anchor import anchor_problem
from leviathan.data.corpus import CorpusError, read_corpus_manifest
from leviathan.data.encode import DEFAULT_BATCH_BYTES, Encoded, default_parallelism, encode_file
from leviathan.data.tokenizers import Tokenizer, token_dtype
from leviathan.io import atomic_path, remove_dead_temps
from leviathan.layout import shard_path
from leviathan.manifest import (
    display_path,
    input_record,
    invalidate_manifest,
    read_manifest,
    vocab_record,
    write_manifest,
)
from leviathan.provenance import utc_now
from leviathan.vocab import get_vocab

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "Shard",
    "ShardError",
    "TokenizeResult",
    "open_shard",
    "tokenize_split",
]


class ShardError(ValueError):
    """A token shard disagrees with its manifest, its dtype or the expected vocabulary."""


# The sampled fingerprint: sha256 of the size and of blocks spread evenly over the file, first
# and last included. 64 x 64 KiB = 4 MiB read, so every run start checks it (milliseconds, where
# the full hash of a 100 GB shard is minutes); tokenization records it beside the full sha256.
FINGERPRINT_BLOCKS = 64
FINGERPRINT_BLOCK_BYTES = 1 << 16


def sampled_fingerprint(
    path: str | os.PathLike[str],
    blocks: int = FINGERPRINT_BLOCKS,
    block_bytes: int = FINGERPRINT_BLOCK_BYTES,
) -> dict[str, Any]:
    """The sampled fingerprint of a file, with the parameters that reproduce it."""
    size = os.path.getsize(path)
    if size <= blocks * block_bytes:
        offsets: list[int] = list(range(0, size, block_bytes))
    else:
        offsets = [i * (size - block_bytes) // (blocks - 1) for i in range(blocks)]
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        for offset in offsets:
            fh.seek(offset)
            digest.update(fh.read(block_bytes))
    return {"sha256": digest.hexdigest(), "blocks": blocks, "block_bytes": block_bytes}


@dataclass
class TokenizeResult:
    """What one tokenization pass produced."""

    path: Path
    tokens: int
    documents: int
    text_bytes: int
    sha256: str
    seconds: float
    counts: np.ndarray[Any, np.dtype[np.int64]] | None = None
    started: _dt.datetime | None = None  # when the tokenization of this split began
    truncated: bool = False  # max_text_bytes stopped it before the split's end

    @property
    def mb_per_s(self) -> float:
        return self.text_bytes / 1e6 / max(self.seconds, 1e-9)


class _ShardSink:
    """Receives encoded batches in order: writes, hashes, counts, reports progress; with
    `max_text_bytes`, keeps the documents that start before that many bytes of text (as
    `leviathan.data.corpus.limit` does) and then asks for no more."""

    def __init__(
        self,
        fh: BinaryIO,
        tokenizer: Tokenizer,
        with_counts: bool,
        bar: Any,
        max_text_bytes: int | None = None,
    ) -> None:
        self.fh = fh
        self.eot = tokenizer.spec.eot_id
        self.max_text_bytes = max_text_bytes
        self.truncated = False
        self.dtype = np.dtype(tokenizer.dtype).newbyteorder("<")
        self.digest = hashlib.sha256()
        n_vocab = tokenizer.spec.n_vocab
        self.counts = np.zeros(n_vocab, dtype=np.int64) if with_counts else None
        self.bar = bar
        self.tokens = self.documents = self.text_bytes = 0

    def _cut(self, batch: Encoded) -> Encoded:
        """The documents of `batch` that start within the text budget."""
        assert self.max_text_bytes is not None
        before = self.text_bytes + np.cumsum((0, *batch.doc_bytes[:-1]))
        keep = int(np.count_nonzero(before < self.max_text_bytes))
        if keep == batch.documents:
            return batch
        self.truncated = True
        ends = np.flatnonzero(np.frombuffer(batch.ids, dtype=self.dtype) == self.eot)
        cut = int(ends[keep - 1]) + 1 if keep else 0
        kept = batch.doc_bytes[:keep]
        return Encoded(batch.ids[: cut * self.dtype.itemsize], keep, sum(kept), kept)

    def __call__(self, batch: Encoded) -> bool:
        """Take a batch; False once the text budget is spent."""
        if self.max_text_bytes is not None:
            batch = self._cut(batch)
        self.fh.write(batch.ids)
        self.digest.update(batch.ids)
        if self.counts is not None:
            ids = np.frombuffer(batch.ids, dtype=self.dtype)
            self.counts += np.bincount(ids, minlength=self.counts.size)
        self.tokens += len(batch.ids) // self.dtype.itemsize
        self.documents += batch.documents
        self.text_bytes += batch.text_bytes
        self.bar.update(batch.text_bytes)
        return not self.truncated and (
            self.max_text_bytes is None or self.text_bytes < self.max_text_bytes
        )


def tokenize_file(
    src: Path,
    tokenizer: Tokenizer,
    out_tmp: Path,
    *,
    threads: int | None = None,
    processes: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    with_counts: bool = False,
    progress_total: int | None = None,
    progress: bool = True,
    max_text_bytes: int | None = None,
) -> TokenizeResult:
    """Encode the documents of `src` (EOT after each) into `out_tmp`; with `max_text_bytes`,
    only the documents that start within that many bytes of text (the rest is not read).

    The caller owns atomicity (pass a temp path from `atomic_path`).
    """
    if max_text_bytes is not None and progress_total is not None:
        progress_total = min(progress_total, max_text_bytes)
    label = out_tmp.name.lstrip(".").split(".")[0]
    bar = tqdm(
        total=progress_total,
        unit="B",
        unit_scale=True,
        unit_divisor=1000,
        desc=f"tokenize {label}",
        disable=not progress,
        file=sys.stderr,
        smoothing=0.1,
    )
    start = time.perf_counter()
    with open(out_tmp, "wb") as fh, bar:
        sink = _ShardSink(fh, tokenizer, with_counts, bar, max_text_bytes)
        encode_file(
            src, tokenizer, sink, threads=threads, processes=processes, batch_bytes=batch_bytes
        )
    return TokenizeResult(
        path=out_tmp,
        tokens=sink.tokens,
        documents=sink.documents,
        text_bytes=sink.text_bytes,
        sha256=sink.digest.hexdigest(),
        seconds=time.perf_counter() - start,
        counts=sink.counts,
        truncated=sink.truncated,
    )


def tokenize_split(
    corpus_dir: str | os.PathLike[str],
    split: str,
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike[str],
    *,
    threads: int | None = None,
    processes: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    with_counts: bool = False,
    progress: bool = True,
    max_text_bytes: int | None = None,
) -> TokenizeResult:
    """Tokenize `<corpus_dir>/<split>.jsonl.zst` into `<out_dir>/<split>.bin` + manifest;
    `max_text_bytes`: only the documents that start within that much text."""
    started = utc_now()
    corpus_manifest = read_corpus_manifest(corpus_dir, split)
    src = Path(corpus_dir) / corpus_manifest["artifact"]["name"]
    # the text the manifest records, or nothing: a shard never pairs new text with an old hash
    if changed := anchor_problem(src):
        raise CorpusError(
            f"{changed}; refetch the corpus (`leviathan data fetch ... --out {corpus_dir}`)"
        )
    out = shard_path(out_dir, split)
    for leftover in remove_dead_temps(out):  # a killed tokenize's, never renamed into place
        log.info("%s: removed the temporary shard a killed tokenize left", leftover)
    with atomic_path(out) as tmp:
        result = tokenize_file(
            src,
            tokenizer,
            tmp,
            threads=threads,
            processes=processes,
            batch_bytes=batch_bytes,
            with_counts=with_counts,
            progress_total=corpus_manifest.get("text_bytes"),
            progress=progress,
            max_text_bytes=max_text_bytes,
        )
        if result.documents == 0:
            raise ShardError(f"{src}: corpus split {split!r} has no documents; refetch it")
        invalidate_manifest(out)
    result.path = out
    result.started = started
    config = {
        "step": "tokenize",
        "corpus": display_path(corpus_dir),
        "split": split,
        "vocab": tokenizer.spec.name,
        "eot_between_documents": True,
        "max_text_bytes": max_text_bytes,
    }
    parallelism = default_parallelism(threads, processes)
    _write_shard_manifest(result, split, tokenizer, src, corpus_manifest, config, parallelism)
    return result


def _write_shard_manifest(
    result: TokenizeResult,
    split: str,
    tokenizer: Tokenizer,
    src: Path,
    corpus_manifest: dict[str, Any],
    config: dict[str, Any],
    parallelism: tuple[int, int],
) -> None:
    """The manifest (kind "tokens") of a shard in place: its counts, sampled fingerprint,
    vocabulary and the manifest of the corpus split it encodes."""
    fingerprint = sampled_fingerprint(result.path, FINGERPRINT_BLOCKS, FINGERPRINT_BLOCK_BYTES)
    write_manifest(
        result.path,
        artifact_type="tokens",
        inputs=[input_record(src, corpus_manifest["artifact"]["sha256"])],
        vocab=vocab_record(tokenizer.spec),
        artifact_sha256=result.sha256,
        config=config,
        started=result.started,
        fields={
            "split": split,
            "dtype": np.dtype(tokenizer.dtype).name,
            "tokens": result.tokens,
            "documents": result.documents,
            "text_bytes": result.text_bytes,
            "eot_between_documents": True,
            "truncated": result.truncated,
            "fingerprint": fingerprint,
            "bpe_source": tokenizer.bpe_source,
            "source_manifest": corpus_manifest,
            "throughput_mb_per_s": round(result.mb_per_s, 3),
            "parallelism": dict(zip(("threads", "processes"), parallelism, strict=True)),
        },
    )


class FileTokens:
    """A shard's tokens read from its file one slice at a time (`np.fromfile`), not mapped:
    pages read stay in the page cache, not in the process's resident memory, so a pass over a
    100 GB shard keeps the memory of one chunk, where a memory map keeps every page it touched
    resident (and counted as the job's memory by a scheduler that accounts RSS)."""

    def __init__(self, path: Path, dtype: np.dtype[Any], n: int) -> None:
        self.path, self.dtype, self.n = path, dtype, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, window: slice) -> np.ndarray[Any, Any]:
        start, stop, _ = window.indices(self.n)
        count = max(0, stop - start)
        offset = start * self.dtype.itemsize
        return np.fromfile(self.path, dtype=self.dtype, count=count, offset=offset)

    def windows(self, starts: np.ndarray[Any, Any], length: int) -> np.ndarray[Any, Any]:
        """[len(starts), length] tokens: row i is tokens [starts[i], starts[i] + length), one
        positioned read each (`os.preadv`, safe from several threads at once)."""
        out = np.empty((len(starts), length), dtype=self.dtype)
        row_bytes = length * self.dtype.itemsize
        rows = out.view(np.uint8).reshape(len(starts), row_bytes)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for i, start in enumerate(starts.tolist()):
                if os.preadv(fd, [rows[i]], start * self.dtype.itemsize) != row_bytes:
                    raise ShardError(
                        f"{self.path}: tokens [{start}, {start + length}) lie past its end "
                        f"({self.n} tokens); the file changed since it was opened"
                    )
        finally:
            os.close(fd)
        return out


@dataclass(frozen=True)
class Shard:
    """A validated token shard, memory-mapped read-only."""

    path: Path
    tokens: np.memmap[Any, np.dtype[Any]]
    manifest: dict[str, Any]
    check: str = "size"  # what open_shard checked of the file against its manifest

    @property
    def sha256(self) -> str:
        """The file's sha256 as its manifest records it (`check` says what was verified)."""
        return str(self.manifest["artifact"]["sha256"])

    def input_record(self, role: str | None = None) -> dict[str, str]:
        """This shard as a step's input: its manifest's sha256 and the check that was made."""
        return input_record(self.path, self.sha256, role=role, check=self.check)

    @property
    def vocab(self) -> str:
        return str(self.manifest["vocab"]["name"])

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def streamed(self, n: int | None = None) -> FileTokens:
        """Its first `n` tokens (all by default) for one pass in order, read from the file
        (bounded resident memory at any shard size: see FileTokens)."""
        return FileTokens(self.path, self.tokens.dtype, len(self) if n is None else n)

    def check_ids(self, ids: np.ndarray[Any, Any]) -> None:
        """Raise ShardError if `ids` (read from this shard) leave [0, n_vocab) of its vocabulary.

        Where data enters (each batch, on the host, before it reaches a device): the model's
        forward then needs no per-batch host sync to validate ids."""
        n_vocab = get_vocab(self.vocab).n_vocab
        if ids.size and int(ids.max()) >= n_vocab:
            raise ShardError(
                f"{self.path}: token id {int(ids.max())} is outside [0, {n_vocab}) of its "
                f"vocabulary {self.vocab}; the file is corrupt or not this manifest's; re-tokenize"
            )


def open_shard(
    path: str | os.PathLike[str],
    vocab: str | None = None,
    verify_sha256: bool = False,
    progress: bool = False,
) -> Shard:
    """Memory-map a `.bin` after checking it against its manifest.

    Checks: the manifest exists; its dtype is the one its vocabulary needs; the file size
    is a whole number of tokens and equals tokens x itemsize; the vocabulary matches
    `vocab` when given; the sampled fingerprint (`sampled_fingerprint`, milliseconds) where
    the manifest records one; and, with `verify_sha256`, the content hash (a pass over the
    whole file; `progress`: a bar).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: token shard not found; run `leviathan data tokenize`")
    manifest = read_manifest(p, artifact_type="tokens")
    dtype = np.dtype(manifest["dtype"])
    spec = get_vocab(manifest["vocab"]["name"])
    if dtype != token_dtype(spec.n_vocab):
        raise ShardError(
            f"{p}: manifest dtype {dtype.name} cannot be right for vocabulary {spec.name} "
            f"(needs {token_dtype(spec.n_vocab).name}); re-tokenize"
        )
    if vocab is not None and get_vocab(vocab).name != spec.name:
        raise ShardError(
            f"{p}: was tokenized with {spec.name}, not {get_vocab(vocab).name}; "
            f"use the shard of the right vocabulary"
        )
    size = p.stat().st_size
    expected = int(manifest["tokens"]) * dtype.itemsize
    if size % dtype.itemsize or size != expected or size == 0:
        raise ShardError(
            f"{p}: {size} bytes, but its manifest says {manifest['tokens']} tokens of "
            f"{dtype.name} = {expected} bytes; the file is truncated or not this manifest's; "
            f"re-run `leviathan data tokenize`"
        )
    check = _check_fingerprint(p, manifest.get("fingerprint"), size)
    if verify_sha256:
        from leviathan.io import sha256_file

        actual = sha256_file(p, progress=progress)
        if actual != manifest["artifact"]["sha256"]:
            raise ShardError(
                f"{p}: sha256 {actual} != manifest {manifest['artifact']['sha256']}; "
                f"the file changed after tokenization; re-run `leviathan data tokenize`"
            )
        check = "full sha256"
    tokens: np.memmap[Any, np.dtype[Any]] = np.memmap(p, dtype=dtype.newbyteorder("<"), mode="r")
    return Shard(path=p, tokens=tokens, manifest=manifest, check=check)


def _check_fingerprint(p: Path, recorded: dict[str, Any] | None, size: int) -> str:
    """Check the sampled fingerprint the manifest records (if any); return what was checked,
    as a record of the shard states it (the sha256 beside it is then the manifest's)."""
    if not recorded:
        return "size"
    if sampled_fingerprint(p, recorded["blocks"], recorded["block_bytes"]) != recorded:
        raise ShardError(
            f"{p}: sampled blocks differ from those its manifest records; the file changed "
            f"after tokenization; re-run `leviathan data tokenize`"
        )
    read = min(size, recorded["blocks"] * recorded["block_bytes"])
    return f"size + sampled fingerprint ({read} of {size} bytes read)"


def verify_shards(paths: list[Path], progress: bool = False) -> None:
    """The full check of shards (size, fingerprint and whole-file sha256 against their
    manifests): what a run start asks for with `runtime.verify_shards: full`."""
    for path in paths:
        open_shard(path, verify_sha256=True, progress=progress)

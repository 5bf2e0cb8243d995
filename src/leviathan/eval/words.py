"""Word-level evaluation: tokenizer-independent words and their losses.

Definition (the same for every vocabulary, so gpt2, cl100k_base and o200k_base models are
compared on the same units): the text of a shard is its documents' UTF-8 bytes; a *word* is
a maximal run of bytes that are not ASCII whitespace (space, \\t, \\n, \\r, \\v, \\f; exactly
`bytes.split()`); each document end (EOT token) is one word of its own, `EOT_WORD`.

A token belongs to the word holding its first non-whitespace byte; a token of whitespace
only (e.g. "\\n\\n") belongs to the next word (it is the cost of starting that word), and
whitespace before a document end belongs to that EOT word. The byte-level BPE
pre-tokenisers never put two words' bytes in one token in practice; where one does, the
later word's bytes are scored inside the earlier word and the later word gets no tokens of
its own (it then does not occur as an evaluated word). A word's loss is the sum of its
tokens' losses, so the word losses of a shard add up to its token losses. A word counts as
evaluated only if every one of its tokens is a target (the shard's first token never is).

Training-corpus word counts (`count_words`, `count_val_words`) use the same definition,
counting only the words that occur in the evaluated text (the distribution's tail is what
matters here and the full Pile vocabulary of words would not fit a JSON file), in bounded
memory: both sides go through hash-partitioned bucket files on disk.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leviathan.data.shards import FileTokens, open_shard
from leviathan.eval.errors import EvalInputError
from leviathan.eval.token_bytes import TokenBytes, token_bytes
from leviathan.io import disk_full, no_space

EOT_WORD = " <|endoftext|>"  # a leading space: never a real word (words hold no whitespace)
_WS = np.zeros(256, dtype=bool)
_WS[list(b" \t\n\r\x0b\x0c")] = True
CHUNK_TOKENS = 1 << 22  # tokens segmented at once (cut at document ends): bounded memory


def word_key(word: bytes) -> str:
    """A word's key in JSON: its UTF-8 text, undecodable bytes kept as surrogate escapes."""
    return word.decode("utf-8", errors="surrogateescape")


def _chunks(tokens: Any, eot_id: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, stop) ranges of about `size` tokens, each ending just after an EOT (or at the
    end), found by scanning forward block by block (bounded memory on any shard)."""
    n = len(tokens)
    start = 0
    while start < n:
        stop = n
        pos = start + size
        while pos < n:
            hits = np.flatnonzero(np.asarray(tokens[pos : pos + size]) == eot_id)
            if hits.size:
                stop = pos + int(hits[0]) + 1
                break
            pos += size
        yield start, stop
        start = stop


@dataclass
class Segmentation:
    """Words of a token chunk: per-token word index (-1: none) and the word byte strings."""

    word_of_token: np.ndarray[Any, np.dtype[np.int64]]
    words: list[bytes]  # EOT words as EOT_WORD's bytes


def segment(tokens: np.ndarray[Any, Any], tb: TokenBytes) -> Segmentation:
    """Words of a token sequence and the word each token belongs to (module docstring)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    special = tb.special[tokens]
    lens = np.where(special, 1, tb.lengths[tokens])
    ends = np.cumsum(lens)
    starts = ends - lens
    data = b"".join(
        b"\x00" if s else tb.pieces[t]
        for t, s in zip(tokens.tolist(), special.tolist(), strict=True)
    )
    arr = np.frombuffer(data, dtype=np.uint8)
    nb = arr.size
    sentinel = np.zeros(nb, dtype=bool)
    sentinel[starts[special]] = True
    ws = _WS[arr] & ~sentinel
    prev_break = np.ones(nb, dtype=bool)
    prev_break[1:] = ws[:-1] | sentinel[:-1]
    word_start = ~ws & (prev_break | sentinel)
    start_pos = np.flatnonzero(word_start)
    if start_pos.size == 0:
        return Segmentation(np.full(tokens.size, -1, dtype=np.int64), [])
    nonws = np.flatnonzero(~ws)
    k = np.searchsorted(nonws, starts)  # first non-whitespace byte at/after each token's start
    anchor = np.where(k < nonws.size, nonws[np.minimum(k, nonws.size - 1)], nb)
    word_of = np.searchsorted(start_pos, anchor, side="right") - 1
    word_of[anchor == nb] = start_pos.size - 1  # trailing whitespace: the last word
    # word k ends at the next word start or the next whitespace byte, whichever is first
    ws_pos = np.flatnonzero(ws)
    j = np.searchsorted(ws_pos, start_pos, side="right")
    next_ws = np.where(
        j < ws_pos.size, ws_pos[np.minimum(j, max(ws_pos.size - 1, 0))] if ws_pos.size else nb, nb
    )
    next_start = np.append(start_pos[1:], nb)
    word_end = np.minimum(next_ws, next_start)
    eot_bytes = EOT_WORD.encode()
    is_sentinel = sentinel[start_pos]
    words = [
        eot_bytes if e else data[s:t]
        for s, t, e in zip(start_pos.tolist(), word_end.tolist(), is_sentinel.tolist(), strict=True)
    ]
    return Segmentation(word_of.astype(np.int64), words)


@dataclass
class WordStats:
    """Evaluated word types with their occurrence counts and summed losses."""

    words: list[str]
    n: np.ndarray[Any, np.dtype[np.int64]]
    loss_sum: np.ndarray[Any, np.dtype[np.float64]]
    tokens_in_words: int  # targets inside evaluated words
    loss_outside_words: float  # loss of targets in words that were not fully evaluated
    targets_outside_words: int

    @property
    def n_words(self) -> int:
        return int(self.n.sum())


class _WordTotals:
    """Running totals of `word_losses`: per evaluated word type (in order of first
    occurrence) its count and summed loss, and what fell outside evaluated words."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.n: list[int] = []
        self.loss: list[float] = []
        self.inside_tokens, self.outside_loss, self.outside_targets = 0, 0.0, 0

    def add_word(self, word: bytes, loss: float) -> None:
        k = self.index.get(word)
        if k is None:
            self.index[word] = len(self.n)
            self.n.append(1)
            self.loss.append(loss)
        else:
            self.n[k] += 1
            self.loss[k] += loss

    def stats(self) -> WordStats:
        return WordStats(
            words=[word_key(w) for w in self.index],
            n=np.asarray(self.n, dtype=np.int64),
            loss_sum=np.asarray(self.loss, dtype=np.float64),
            tokens_in_words=self.inside_tokens,
            loss_outside_words=self.outside_loss,
            targets_outside_words=self.outside_targets,
        )


def word_losses(
    shard_tokens: np.ndarray[Any, Any],
    target_losses: np.ndarray[Any, Any],
    vocab: str,
    chunk_tokens: int = CHUNK_TOKENS,
) -> WordStats:
    """Words of shard_tokens[: len(target_losses) + 1] and their losses.

    target_losses[p - 1] is the loss of token p (p >= 1), as `evaluate_shard` keeps them.
    Where the losses cover only a prefix of the shard, its last word may be cut: it is not
    counted as evaluated.
    """
    tb = token_bytes(vocab)
    n_tokens = len(target_losses) + 1
    if len(shard_tokens) < n_tokens:
        raise EvalInputError(
            f"{len(target_losses)} target losses for a shard of {len(shard_tokens)} tokens"
        )
    totals = _WordTotals()
    for start, stop in _chunks(shard_tokens[:n_tokens], tb.eot_id, chunk_tokens):
        seg = segment(np.asarray(shard_tokens[start:stop], dtype=np.int64), tb)
        prefix_cut = stop == n_tokens < len(shard_tokens)
        _add_chunk(totals, seg, target_losses, start, stop, prefix_cut)
    return totals.stats()


def _add_chunk(
    totals: _WordTotals,
    seg: Segmentation,
    target_losses: np.ndarray[Any, Any],
    start: int,
    stop: int,
    prefix_cut: bool,
) -> None:
    """Add the words of tokens [start, stop) to `totals` (`prefix_cut`: the losses end at
    `stop` inside the shard, so the chunk's last word may be cut)."""
    w = seg.word_of_token
    lo = np.zeros(stop - start, dtype=np.float64)  # token p's loss is target_losses[p - 1]
    tg = np.ones(stop - start, dtype=bool)  # token p is a target (all but the shard's first)
    first = max(start, 1)
    lo[first - start :] = target_losses[first - 1 : stop - 1]
    if start == 0:
        tg[0] = False
    none = w < 0
    if none.any():
        totals.outside_loss += float(lo[none].sum())
        totals.outside_targets += int(tg[none].sum())
    n_words = len(seg.words)
    wl = np.bincount(w[~none], weights=lo[~none], minlength=n_words)
    n_tok = np.bincount(w[~none], minlength=n_words)
    n_tgt = np.bincount(w[~none], weights=tg[~none].astype(np.float64), minlength=n_words)
    full = (n_tok > 0) & (n_tok == n_tgt)
    if prefix_cut and n_words and seg.words[-1] != EOT_WORD.encode():
        full[-1] = False
    totals.outside_loss += float(wl[~full].sum())
    totals.outside_targets += int(n_tgt[~full].sum())
    totals.inside_tokens += int(n_tok[full].sum())
    for i in np.flatnonzero(full).tolist():
        totals.add_word(seg.words[i], float(wl[i]))


def iter_words(
    tokens: np.ndarray[Any, Any] | FileTokens, vocab: str, chunk_tokens: int = CHUNK_TOKENS
) -> Iterator[list[bytes]]:
    """Words (bytes; EOT as EOT_WORD) of a token sequence, chunk by chunk, fast path.

    Equal to `segment`'s words: documents are decoded whole and split on ASCII whitespace.
    """
    tb = token_bytes(vocab)
    eot_bytes = EOT_WORD.encode()
    for start, stop in _chunks(tokens, tb.eot_id, chunk_tokens):
        chunk = np.asarray(tokens[start:stop], dtype=np.int64)
        cuts = np.flatnonzero(chunk == tb.eot_id)
        out: list[bytes] = []
        prev = 0
        for c in [*cuts.tolist(), None]:
            doc = chunk[prev:c]
            if doc.size:
                special = tb.special[doc]
                pieces = tb.pieces
                out.extend(b"".join(pieces[t] for t in doc[~special].tolist()).split())
            if c is None:
                break
            out.append(eot_bytes)
            prev = c + 1
        yield out


@dataclass
class WordCounts:
    counts: dict[str, int]  # word key -> training count (0 if absent), sorted by key
    train_tokens: int
    train_words: int
    val_words: int = 0  # occurrences of words in the evaluated text (count_val_words)


# Word counting in bounded memory: the evaluated text's words and the training words are
# partitioned by hash into bucket files of about BUCKET_BYTES on disk, then counted one bucket
# at a time, read back in blocks. Memory: one chunk of words plus one bucket's distinct wanted
# words, whatever the sizes (the shards are read, not mapped: see FileTokens);
# disk: the training words counted once (about 5 bytes per token) while it runs.
BUCKET_BYTES = 32 << 20
MAX_BUCKETS = 512  # open files while partitioning (two per bucket at most)


class _Buckets:
    """Newline-separated words (words hold no ASCII whitespace) spread over bucket files."""

    def __init__(self, root: Path, name: str, n: int) -> None:
        self.paths = [root / f"{name}.{i}" for i in range(n)]
        # unbuffered: `add` writes one joined block per bucket and chunk, so memory stays
        # one chunk of words however many buckets are open
        self._files = [open(p, "wb", buffering=0) for p in self.paths]  # noqa: SIM115

    def add(self, words: list[bytes]) -> None:
        n = len(self._files)
        parts: list[list[bytes]] = [[] for _ in range(n)]
        for w in words:
            parts[hash(w) % n].append(w)
        for fh, part in zip(self._files, parts, strict=True):
            if part:
                fh.write(b"\n".join(part) + b"\n")

    def close(self) -> None:
        for fh in self._files:
            fh.close()


READ_BYTES = 4 << 20  # a bucket is read back this many bytes at a time


def _bucket_words(path: Path) -> Iterator[list[bytes]]:
    """A bucket's words, READ_BYTES at a time (never the whole bucket as one list), then the
    file is removed."""
    with open(path, "rb") as fh:
        rest = b""
        while block := fh.read(READ_BYTES):
            lines = (rest + block).split(b"\n")
            rest = lines.pop()  # an incomplete last line waits for the next block
            yield lines
    path.unlink()


def _count_buckets(
    wanted: Iterator[list[bytes]],
    train: Iterator[list[bytes]],
    n_tokens: int,
    tmp_dir: str | os.PathLike[str] | None,
) -> tuple[dict[str, int], int, int]:
    """(training count of every wanted word, sorted by key; training words; wanted words) of
    the first `n_tokens` training tokens. A full disk under `tmp_dir` is `DiskFull`, one line,
    once the bucket files are removed."""
    try:
        return _count_in_buckets(wanted, train, _n_buckets(n_tokens), tmp_dir)
    except OSError as exc:
        if not no_space(exc):
            raise
        fix = "free space there, or set TMPDIR to a filesystem with room, then rerun the evaluation"
        where = Path(tmp_dir or tempfile.gettempdir())
        raise disk_full(where, 5 * n_tokens, fix) from exc


def _count_in_buckets(
    wanted: Iterator[list[bytes]],
    train: Iterator[list[bytes]],
    n_buckets: int,
    tmp_dir: str | os.PathLike[str] | None,
) -> tuple[dict[str, int], int, int]:
    found: list[tuple[str, int]] = []
    n_train = n_wanted = 0
    with tempfile.TemporaryDirectory(prefix="word-counts-", dir=tmp_dir) as tmp:
        sides = _Buckets(Path(tmp), "wanted", n_buckets), _Buckets(Path(tmp), "train", n_buckets)
        for chunk in wanted:
            n_wanted += len(chunk)
            sides[0].add(chunk)
        for chunk in train:
            n_train += len(chunk)
            sides[1].add(chunk)
        for side in sides:
            side.close()
        for want_path, train_path in zip(sides[0].paths, sides[1].paths, strict=True):
            keys = {w for block in _bucket_words(want_path) for w in block}
            counts: Counter[bytes] = Counter()
            for block in _bucket_words(train_path):
                counts.update(w for w in block if w in keys)
            found.extend((word_key(w), counts.get(w, 0)) for w in keys)
    found.sort()
    return dict(found), n_train, n_wanted


def _n_buckets(n_tokens: int) -> int:
    """Buckets for the training words of n_tokens tokens (about 5 bytes each with newlines)."""
    return min(MAX_BUCKETS, max(1, -(-5 * n_tokens // BUCKET_BYTES)))


def _train_words(
    train: str | os.PathLike[str], vocab: str, max_tokens: int | None, chunk_tokens: int
) -> tuple[Iterator[list[bytes]], int]:
    shard = open_shard(train, vocab)
    n = len(shard) if max_tokens is None else min(max_tokens, len(shard))
    if n <= 0:
        raise EvalInputError(f"{train}: no tokens to count (max_tokens={max_tokens})")
    return iter_words(shard.streamed(n), vocab, chunk_tokens), n


def count_words(
    train: str | os.PathLike[str],
    words: set[str],
    *,
    vocab: str,
    max_tokens: int | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    tmp_dir: str | os.PathLike[str] | None = None,
) -> WordCounts:
    """Training-corpus counts of `words` (keys as `word_key` gives them) in a train shard
    (bounded memory besides `words` itself: see BUCKET_BYTES)."""
    train_words, n = _train_words(train, vocab, max_tokens, chunk_tokens)
    wanted = iter([[w.encode("utf-8", errors="surrogateescape") for w in words]])
    counts, n_words, _ = _count_buckets(wanted, train_words, n, tmp_dir)
    return WordCounts(counts, n, n_words)


def count_val_words(
    train: str | os.PathLike[str],
    val: str | os.PathLike[str],
    *,
    vocab: str,
    max_tokens: int | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    tmp_dir: str | os.PathLike[str] | None = None,
) -> WordCounts:
    """Training-corpus counts of every word of the val shard, streamed from both shards
    through bucket files (`tmp_dir`: where; default the system's): memory stays bounded by a
    chunk and a bucket, plus the result (one entry per distinct val word)."""
    val_shard = open_shard(val, vocab)
    train_words, n = _train_words(train, vocab, max_tokens, chunk_tokens)
    val_tokens = val_shard.streamed()
    val_words = iter_words(val_tokens, vocab, chunk_tokens)
    counts, n_words, n_val = _count_buckets(val_words, train_words, n, tmp_dir)
    return WordCounts(counts, n, n_words, n_val)

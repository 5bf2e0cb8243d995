"""The tokenization engine: corpus lines -> token ids on many threads and processes.

The main process streams the corpus file as raw JSON lines and groups them into batches
of about `batch_bytes`. Each batch is one task: parse the lines, run tiktoken's
`encode_ordinary_batch` on `threads` threads, and pack the ids (EOT after every document)
into a little-endian array of the shard dtype. With `processes == 1` tasks run in this
process, one after the other; with more they run in a pool of worker processes, each
with its own GIL, so parsing and packing scale with the cores as well as encoding
(in one process they would hold up the encoder threads), at most `processes + 2` tasks
in flight. Results come back in order and are handed to `sink`; memory stays bounded
by the batches in flight whatever the corpus size (plus one tokenizer per worker).
"""

from __future__ import annotations

import array
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from leviathan.data.corpus import CorpusError
from leviathan.data.jsonl import jsonl_lines
from leviathan.data.tokenizers import Tokenizer, load_tokenizer
from leviathan.data.workers import worker_pool

DEFAULT_BATCH_BYTES = 4 << 20  # text per task: small enough to keep every worker busy
MAX_DEFAULT_PROCESSES = 32  # each worker holds its own tokenizer (~200 MB for o200k)
_TYPECODES = {2: "H", 4: "I"}  # shard itemsize -> array typecode (native = little-endian)


def usable_cpus() -> int:
    """CPUs this process may use (respects cgroup/SLURM affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_parallelism(
    threads: int | None = None, processes: int | None = None
) -> tuple[int, int]:
    """(threads per process, processes).

    Default: one worker process per usable CPU, at most MAX_DEFAULT_PROCESSES, the CPUs
    shared out as threads. Processes beat threads because JSON parsing and packing ids
    need the GIL; threads in one process are what `processes=1` gives.
    """
    cpus = usable_cpus()
    procs = processes or min(cpus, MAX_DEFAULT_PROCESSES)
    return threads or max(1, cpus // procs), procs


def line_batches(path: Path, batch_bytes: int) -> Iterator[list[bytes]]:
    """Raw JSON lines of a (zstd-compressed) JSONL file, in batches of ~batch_bytes."""
    batch: list[bytes] = []
    size = 0
    for line in jsonl_lines(path):
        if not line.strip():
            continue
        batch.append(line)
        size += len(line)
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class MalformedLineError(ValueError):
    """A corpus line is not a JSON object with a `text` field."""


def batch_texts(lines: list[bytes]) -> list[str]:
    """The `text` field of each JSON line."""
    try:
        return [json.loads(line)["text"] for line in lines]
    except (ValueError, KeyError, TypeError) as exc:
        bad = next(line for line in lines if not _is_doc(line))
        raise MalformedLineError(
            f"malformed line {bad[:80]!r} ({type(exc).__name__}: {exc})"
        ) from None


def _is_doc(line: bytes) -> bool:
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("text"), str)


@dataclass(frozen=True)
class Encoded:
    """One encoded batch: packed ids (EOT after each document) and its sizes."""

    ids: bytes
    documents: int
    text_bytes: int
    doc_bytes: tuple[int, ...] = ()  # UTF-8 bytes of each document (where a budget cuts)


def encode_texts(tokenizer: Tokenizer, texts: list[str], threads: int) -> Encoded:
    """Encode texts with `encode_ordinary_batch` and pack them with EOT separators."""
    typecode = _TYPECODES[tokenizer.dtype.itemsize]
    eot = tokenizer.spec.eot_id
    packed = array.array(typecode)
    for doc_ids in tokenizer.encode_batch(texts, threads):
        packed.fromlist(doc_ids)  # twice as fast as extend() for lists
        packed.append(eot)
    if sys.byteorder != "little":
        packed.byteswap()
    doc_bytes = tuple(len(t.encode("utf-8")) for t in texts)
    return Encoded(packed.tobytes(), len(texts), sum(doc_bytes), doc_bytes)


# Workers are forked on Linux: they start at once, share the parent's loaded tokenizer
# copy-on-write, and do not re-import `__main__` (which would re-run a rule script that
# lacks an `if __name__ == "__main__"` guard). At that point the parent holds no threads
# of ours (the pool path starts none). Elsewhere fork is unsafe, so workers are spawned.
_START_METHOD = "fork" if sys.platform == "linux" else "spawn"
_worker_tokenizer: Tokenizer | None = None


def _init_worker(vocab: str, cache: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = load_tokenizer(vocab, Path(cache))


def _worker_task(lines: list[bytes], threads: int) -> Encoded:
    assert _worker_tokenizer is not None, "worker not initialised"
    return encode_texts(_worker_tokenizer, batch_texts(lines), threads)


def encode_file(
    path: Path,
    tokenizer: Tokenizer,
    sink: Callable[[Encoded], bool],
    *,
    threads: int | None = None,
    processes: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> None:
    """Encode the documents of a JSONL(.zst) corpus file, handing batches to `sink` in order
    until it returns False (it has what it needs: the rest is not read)."""
    try:
        _encode_file(path, tokenizer, sink, threads, processes, batch_bytes)
    except MalformedLineError as exc:
        raise CorpusError(
            f"{path}: {exc}; not a corpus written by `leviathan data fetch`: re-run that step"
        ) from None


def _encode_file(
    path: Path,
    tokenizer: Tokenizer,
    sink: Callable[[Encoded], bool],
    threads: int | None,
    processes: int | None,
    batch_bytes: int,
) -> None:
    n_threads, n_procs = default_parallelism(threads, processes)
    batches = line_batches(path, batch_bytes)
    if n_procs == 1:
        for lines in batches:
            if not sink(encode_texts(tokenizer, batch_texts(lines), n_threads)):
                return
        return
    ctx = get_context(_START_METHOD)
    init_args = (tokenizer.spec.name, str(tokenizer.bpe_path.parent))
    # workers that die with this process: a killed tokenize leaves none behind
    with worker_pool(n_procs, mp_context=ctx, initializer=_init_worker, initargs=init_args) as pool:
        pending: deque[Future[Encoded]] = deque()
        try:
            for lines in batches:
                pending.append(pool.submit(_worker_task, lines, n_threads))
                if len(pending) >= n_procs + 2 and not sink(pending.popleft().result()):
                    return
            while pending:
                if not sink(pending.popleft().result()):
                    return
        finally:
            for future in pending:
                future.cancel()

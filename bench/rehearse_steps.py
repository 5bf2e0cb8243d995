"""The rehearsal's steps (bench/rehearse.py): the generated corpus, and each step of the study
measured in a fresh process (its time, CPU seconds and own peak RSS)."""

from __future__ import annotations

import json
import random
import resource
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

VOCABS = ("gpt2", "cl100k_base", "o200k_base")
RARE_EVERY = 20  # one synthetic rare word per this many words
ZIPF_A = 1.3
DOC_BYTES = (1_000, 16_000)
FILE_BYTES = 256 << 20  # JSONL files of the generated corpus
TRAIN_STEPS = 2  # training steps at the 200m shape (the first is warm-up)
EVAL_WINDOWS = 4
LOADER_BATCHES = 5

# ---------------------------------------------------------------- the corpus


def make_corpus(out: Path, size: int, seed: int = 0) -> dict[str, Any]:
    """JSONL files of about `size` bytes of text (module docstring); returns what was made."""
    import numpy as np

    from leviathan.data.embedded import embedded_documents

    paragraphs = [p for doc in embedded_documents() for p in doc.text.split("\n\n") if p.strip()]
    rng = random.Random(seed)
    zipf = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    written = n_docs = 0
    fh = None
    while written < size:
        if fh is None or fh.tell() >= FILE_BYTES:
            if fh:
                fh.close()
            fh = open(out / f"part-{n_docs:09d}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        target = rng.randint(*DOC_BYTES)
        parts, n = [], 0
        while n < target:
            p = rng.choice(paragraphs)
            parts.append(p)
            n += len(p) + 2
        words = "\n\n".join(parts).split(" ")
        ranks = zipf.zipf(ZIPF_A, size=len(words) // RARE_EVERY + 1)
        for i, r in zip(range(0, len(words), RARE_EVERY), ranks.tolist(), strict=False):
            words[i] = f"q{r:x}z"
        text = " ".join(words)
        fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        written += len(text.encode("utf-8"))
        n_docs += 1
    if fh:
        fh.close()
    return {"text_bytes": written, "documents": n_docs}


# ---------------------------------------------------------------- the steps (child processes)


def _rss_mb() -> float:
    """Peak RSS of this process plus that of its largest finished child (Linux: KiB)."""
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (self_kb + child_kb) / 1024


class Clock:
    """Wall and CPU seconds of a block, CPU of finished child processes included: on a shared
    machine the CPU seconds are what a dedicated one would spend (wall time there = CPU
    seconds / CPUs used), where the wall time here counts the other users' load too."""

    @staticmethod
    def _cpu() -> float:
        me, kids = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def __enter__(self) -> Clock:
        self._wall, self._cpu0 = time.perf_counter(), self._cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu_s = self._cpu() - self._cpu0

    def record(self) -> dict[str, float]:
        return {"seconds": self.seconds, "cpu_s": self.cpu_s}


def _timed(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run a step; its own "seconds" (the work, imports left out) where it gives them."""
    t0 = time.perf_counter()
    result = fn(*args)
    result.setdefault("seconds", time.perf_counter() - t0)
    result["rss_mb"] = _rss_mb()
    return result


def step_fetch(src: str, out: str) -> dict[str, Any]:
    from leviathan.data.fetch import fetch_text

    with Clock() as clock:
        manifests = fetch_text(out, [src])
    return {"bytes": sum(m["text_bytes"] for m in manifests.values()), **clock.record()}


def step_tokenize(corpus: str, vocab: str, out: str) -> dict[str, Any]:
    from leviathan.data.encode import default_parallelism
    from leviathan.data.prepare import tokenize_corpus
    from leviathan.manifest import read_manifest

    with Clock() as clock:
        summary = tokenize_corpus(corpus, vocab, out, progress=False)
    text = sum(read_manifest(Path(out) / f"{s}.bin")["text_bytes"] for s in summary["splits"])
    tokens = sum(s["tokens"] for s in summary["splits"].values())
    return {
        "bytes": text,
        "tokens": tokens,
        "processes": default_parallelism()[1],
        **clock.record(),
    }


def step_counts(shard: str) -> dict[str, Any]:
    from leviathan.data.counts import count_shard
    from leviathan.data.shards import open_shard

    s = open_shard(shard)
    with Clock() as clock:
        count_shard(s)
    return {"tokens": len(s), **clock.record()}


def step_word_counts(train: str, val: str, vocab: str) -> dict[str, Any]:
    from leviathan.eval.words import count_val_words

    with Clock() as clock:
        wc = count_val_words(train, val, vocab=vocab)
    return {"tokens": wc.train_tokens, "val_word_types": len(wc.counts), **clock.record()}


def step_loader(train: str, context: int, global_batch: int) -> dict[str, Any]:
    from leviathan.data.loader import TrainLoader

    loader = TrainLoader(train, context=context, global_batch=global_batch, seed=0)
    loader.batch(0)
    with Clock() as clock:
        for step in range(1, LOADER_BATCHES + 1):
            loader.batch(step)
    return {k: v / LOADER_BATCHES for k, v in clock.record().items()}


def step_run_start(train: str) -> dict[str, Any]:
    from leviathan.data.shards import open_shard, verify_shards

    with Clock() as sampled:
        open_shard(train)
    with Clock() as full:
        verify_shards([Path(train)])
    return {
        "sampled_s": sampled.seconds,
        "full_s": full.seconds,
        "full_cpu_s": full.cpu_s,
        "bytes": Path(train).stat().st_size,
    }


def step_train(train: str, val: str, run_dir: str) -> dict[str, Any]:
    from leviathan.train.config import (
        CheckpointConfig,
        RuntimeConfig,
        ValidationConfig,
        train_config,
    )
    from leviathan.train.metrics_log import read_metrics
    from leviathan.train.trainer import train as run_train

    cfg = train_config(
        "200m",
        "o200k_base",
        "leviathan",
        global_batch=1,
        micro_batch=1,
        total_tokens=TRAIN_STEPS * 512,
        warmup_steps=1,
    )
    runtime = RuntimeConfig(
        device="cpu",
        progress=False,
        validation=ValidationConfig(every=0),
        checkpoint=CheckpointConfig(every=0),
    )
    run_train(cfg, train_bins=[train], val_bin=None, run_dir=run_dir, runtime=runtime)
    steps = [r["step_s"] for r in read_metrics(Path(run_dir) / "metrics.jsonl", "train")]
    return {"seconds": min(steps[1:] or steps), "steps": len(steps)}


def step_checkpoint(run_dir: str, out: str) -> dict[str, Any]:
    from leviathan.checkpoint.files import final_dir
    from leviathan.checkpoint.read import load_checkpoint
    from leviathan.checkpoint.store import save_checkpoint

    final = final_dir(run_dir)
    t0 = time.perf_counter()
    ck = load_checkpoint(final)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    saved = save_checkpoint(
        Path(out), "copy", model_state=ck["model"], optim_state=ck["optim"], state=ck["state"]
    )
    save_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in saved.rglob("*") if p.is_file())
    return {"load_s": load_s, "save_s": save_s, "bytes": size, "seconds": load_s + save_s}


def step_eval(run_dir: str, val: str) -> dict[str, Any]:
    from leviathan.eval.checkpoint import open_checkpoint
    from leviathan.eval.perplexity import evaluate_shard

    ckpt, model = open_checkpoint(run_dir, device="cpu")
    t0 = time.perf_counter()
    evaluate_shard(
        model, val, vocab="o200k_base", context=ckpt.context, batch_size=1, max_windows=EVAL_WINDOWS
    )
    return {"seconds": (time.perf_counter() - t0) / EVAL_WINDOWS, "tokens": ckpt.context}


def measure(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one step in a fresh (spawned) process: its time and its own peak RSS."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        result = pool.submit(_timed, fn, *args).result()
    shown = tuple(Path(a).name if isinstance(a, str) else a for a in args)
    print(f"  {fn.__name__}{shown}: {result}", file=sys.stderr)
    return result


def run_steps(work: Path, size: int, log: Path) -> dict[str, Any]:
    """Every step, measured; the measurements so far are rewritten to `log` after each."""
    from leviathan.manifest import read_manifest

    m: dict[str, Any] = {"tokenize": {}, "counts": {}, "word_counts": {}}

    def keep(key: str, result: dict[str, Any], vocab: str | None = None) -> None:
        if vocab is None:
            m[key] = result
        else:
            m[key][vocab] = result
        log.write_text(json.dumps(m, indent=1))

    keep("corpus", make_corpus(work / "text", size))
    corpus = work / "corpus"
    fetched = measure(step_fetch, str(work / "text"), str(corpus))
    keep("fetch", {**fetched, "val_bytes": read_manifest(corpus / "val.jsonl.zst")["text_bytes"]})
    for v in VOCABS:
        tok = work / "tokens" / v
        train, val = str(tok / "train.bin"), str(tok / "val.bin")
        keep("tokenize", measure(step_tokenize, str(corpus), v, str(tok)), v)
        keep("counts", measure(step_counts, train), v)
        keep("word_counts", measure(step_word_counts, train, val, v), v)
        if v != "o200k_base":
            shutil.rmtree(tok)  # disk: only o200k's shards are needed further on
    o200k = work / "tokens" / "o200k_base"
    train, val, run = str(o200k / "train.bin"), str(o200k / "val.bin"), str(work / "run")
    keep("loader", measure(step_loader, train, 512, 512))
    keep("run_start", measure(step_run_start, train))
    keep("train", measure(step_train, train, val, run))
    keep("checkpoint", measure(step_checkpoint, run, str(work / "ckpt")))
    keep("eval", measure(step_eval, run, val))
    return m

"""Tokenization throughput: the full path vs raw `encode_ordinary_batch`, plus peak RSS.

One run builds a large corpus split (the embedded corpus repeated to --mb megabytes of
text, ids made unique per repeat), then, in separate child processes so that memory and
timing do not mix, alternately measures:

* raw:  every document read and parsed into memory first (not timed), then only
        `encode_ordinary_batch(batch, num_threads=T)` over the same batches of text;
* full: `leviathan.data.shards.tokenize_split` - read .jsonl.zst -> parse -> encode ->
        pack -> write .bin with sha256 and train counts, plus the manifest - timed end to
        end, with the same T encoders in total, in each layout of --layouts
        ("PxT" = P processes x T threads each; P=1 runs in-process; the default is
        the library default, one process per encoder); peak RSS of the main process
        and of the largest worker process.

Throughput is text megabytes (10^6 UTF-8 bytes) per second; ratio = full / raw (target
>= 0.9). Usage:

    .venv/bin/python bench/bench_tokenize.py [--mb 200] [--vocab o200k_base] [--threads N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from leviathan.data.corpus import Document, write_corpus
from leviathan.data.embedded import embedded_documents
from leviathan.data.encode import DEFAULT_BATCH_BYTES, batch_texts, line_batches, usable_cpus
from leviathan.data.shards import tokenize_split
from leviathan.data.tokenizers import load_tokenizer


def build_corpus(out: Path, megabytes: float) -> dict[str, Any]:
    """The embedded corpus repeated until `megabytes` of text, as split 'train'."""
    base = [d for d in embedded_documents() if d.text.strip()]
    target = int(megabytes * 1e6)

    def repeated() -> Iterator[tuple[str, Document]]:
        size = 0
        for rep in itertools.count():
            for doc in base:
                if size >= target:
                    return
                size += len(doc.text.encode())
                yield "train", Document(f"rep{rep}/{doc.id}", doc.text)

    return write_corpus(out, repeated(), splits=("train",), source={"kind": "bench"})["train"]


def _rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (worker processes)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def child_full(corpus: Path, vocab: str, layout: str, batch_bytes: int) -> dict[str, float]:
    procs, threads = (int(v) for v in layout.split("x"))
    tok = load_tokenizer(vocab)
    with tempfile.TemporaryDirectory(dir=corpus.parent) as out:
        cpu, start = _cpu_s(), time.perf_counter()
        result = tokenize_split(
            corpus,
            "train",
            tok,
            out,
            threads=threads,
            processes=procs,
            batch_bytes=batch_bytes,
            with_counts=True,
            progress=False,
        )
        seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "mb": result.text_bytes / 1e6,
        "tokens": result.tokens,
        "peak_rss_mb": _rss_mb(resource.RUSAGE_SELF),
        "worker_peak_rss_mb": _rss_mb(resource.RUSAGE_CHILDREN) if procs > 1 else 0.0,
    }


def child_raw(corpus: Path, vocab: str, layout: str, batch_bytes: int) -> dict[str, float]:
    threads = int(layout)
    tok = load_tokenizer(vocab)
    batches = [batch_texts(b) for b in line_batches(corpus / "train.jsonl.zst", batch_bytes)]
    mb = sum(len(t.encode()) for b in batches for t in b) / 1e6
    cpu, start = _cpu_s(), time.perf_counter()
    tokens = 0
    for batch in batches:
        tokens += sum(map(len, tok.encoding.encode_ordinary_batch(batch, num_threads=threads)))
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "mb": mb,
        "tokens": tokens,
        "peak_rss_mb": _rss_mb(resource.RUSAGE_SELF),
    }


def run_child(mode: str, layout: str, args: argparse.Namespace, corpus: Path) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--layout",
        layout,
        "--corpus",
        str(corpus),
        "--vocab",
        args.vocab,
        "--batch-bytes",
        str(args.batch_bytes),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def _layouts(text: str, threads: int) -> list[str]:
    out = []
    for item in text.split(","):
        procs = int(item)
        if threads % procs:
            raise SystemExit(f"--layouts: {procs} processes do not divide {threads} threads")
        out.append(f"{procs}x{threads // procs}")
    return out


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=200.0, help="text megabytes to tokenize")
    ap.add_argument("--vocab", default="o200k_base")
    ap.add_argument("--threads", type=int, default=usable_cpus(), help="encoders in total")
    ap.add_argument(
        "--layouts",
        default=None,
        help="comma-separated process counts for the full path "
        "(default: THREADS,1 = one process per encoder, then in-process)",
    )
    ap.add_argument("--batch-bytes", type=int, default=DEFAULT_BATCH_BYTES)
    ap.add_argument("--repeats", type=int, default=2, help="alternating raw/full rounds")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--child", choices=("full", "raw"), help=argparse.SUPPRESS)
    ap.add_argument("--layout", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args()


Rounds = tuple[list[dict[str, float]], dict[str, list[dict[str, float]]]]


def measure_rounds(args: argparse.Namespace, layouts: list[str]) -> Rounds:
    """Build the corpus, then alternate raw and full (each layout) child runs `--repeats`
    times; one line per round. Returns (raw runs, full runs by layout)."""
    raw: list[dict[str, float]] = []
    full: dict[str, list[dict[str, float]]] = {lay: [] for lay in layouts}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        corpus = Path(tmp) / "corpus"
        t0 = time.perf_counter()
        manifest = build_corpus(corpus, args.mb)
        print(
            f"built {manifest['text_bytes'] / 1e6:.1f} MB corpus "
            f"({manifest['documents']} docs) in {time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        for _ in range(args.repeats):
            raw.append(run_child("raw", str(args.threads), args, corpus))
            line = [
                f"load {os.getloadavg()[0]:.2f}: raw {args.threads} threads "
                f"{raw[-1]['mb'] / raw[-1]['seconds']:.2f} MB/s"
            ]
            for lay in layouts:
                r = run_child("full", lay, args, corpus)
                full[lay].append(r)
                line.append(
                    f"full {lay} {r['mb'] / r['seconds']:.2f} MB/s "
                    f"(RSS {r['peak_rss_mb']:.0f}/{r['worker_peak_rss_mb']:.0f} MB)"
                )
            print("; ".join(line), flush=True)
    return raw, full


def summarize(
    args: argparse.Namespace, raw: list[dict[str, float]], full: dict[str, list[dict[str, float]]]
) -> dict[str, object]:
    """Medians over the rounds: raw throughput, and each layout's throughput and ratio to it."""
    raw_mbs = statistics.median(r["mb"] / r["seconds"] for r in raw)
    raw_cpu = statistics.median(r["cpu_s"] for r in raw)
    summary: dict[str, object] = {
        "vocab": args.vocab,
        "threads": args.threads,
        "cpus": usable_cpus(),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "text_mb": round(raw[0]["mb"], 1),
        "tokens": raw[0]["tokens"],
        "raw_mb_per_s": round(raw_mbs, 2),
        "raw_cpu_s": round(raw_cpu, 2),
        "raw_peak_rss_mb": round(max(r["peak_rss_mb"] for r in raw)),
    }
    for lay, runs in full.items():
        mbs = statistics.median(r["mb"] / r["seconds"] for r in runs)
        summary[f"full_{lay}"] = {
            "mb_per_s": round(mbs, 2),
            "ratio": round(mbs / raw_mbs, 3),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
            "best_round_ratio": round(
                max(
                    (f["mb"] / f["seconds"]) / (r["mb"] / r["seconds"])
                    for f, r in zip(runs, raw, strict=True)
                ),
                3,
            ),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)),
            "worker_peak_rss_mb": round(max(r["worker_peak_rss_mb"] for r in runs)),
        }
    return summary


def main() -> int:
    args = _parse_args()
    if args.child:
        fn = child_full if args.child == "full" else child_raw
        print(json.dumps(fn(args.corpus, args.vocab, args.layout, args.batch_bytes)))
        return 0
    layouts = _layouts(args.layouts or f"{args.threads},1", args.threads)
    load_tokenizer(args.vocab)  # fill the BPE cache before timing anything
    raw, full = measure_rounds(args, layouts)
    print(json.dumps(summarize(args, raw, full), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

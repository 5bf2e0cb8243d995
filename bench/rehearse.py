"""Rehearse the paper's study on a CPU: run every step at a measurable size, predict it at the
study's size, and check the prediction against the limits the study's config gives its rule.

    .venv/bin/python bench/rehearse.py --size 2G [--work DIR] [--json out.json]

The corpus. `--size` bytes of JSONL text built from the embedded corpus (CPython's docstrings,
comments and documentation: English prose mixed with code, as The Pile mixes web text, papers,
books and GitHub) reshuffled paragraph by paragraph into documents of 1-16 KB (the Pile's bulk),
with one word in twenty replaced by a synthetic rare word drawn from a Zipf law (exponent 1.3),
so that distinct words keep growing with the text as in real corpora (Heaps' law) instead of
saturating at the source's vocabulary. Its bytes per token (printed) are close to the Pile's.

The steps, each in a fresh process (so its peak RSS is its own, workers included): fetch from
local files (`fetch_text`, resumable parts), then for gpt2, cl100k_base and o200k_base:
tokenize (counts in the same pass), counts from a shard (`count_shard`), word counts
(`count_val_words`); the loader at the study's global batch (512 x 512); the run-start checks
(sampled fingerprint, full sha256); a few training steps at the 200m shape (micro batch 1, on
the real trainer, which writes its final checkpoint); that checkpoint's load and save; and
evaluation batches at the 200m shape.

Predictions at the study (config/paper.yaml): CPU steps scale with their work (bytes or tokens:
all are linear) from the measured rate per CPU-second (process time, children included: on a
shared machine wall time counts the other users' load), on one CPU, or on the job's CPUs for
the tokenizer (it runs one process per CPU); their memory is what was measured (streaming: it does
not grow with the data), the tokenizer's scaled by its process count. GPU steps (training,
evaluation) come from the plan's FLOPs (leviathan.cost.plan) at the stated MFU on the
configured GPU model. Checkpoint save/load at the 1.2b state size is the measured GB/s on the
200m checkpoint times the 1.2b checkpoint's bytes. Every limit is the study's config: each
rule's runtime and mem_mb (config.rule_resources, the schema's defaults), each scale's
resources, runtime.dist_timeout_s, the interval between checkpoints. Exit status 1 when a
prediction exceeds its limit.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "paper.yaml"
VOCABS = ("gpt2", "cl100k_base", "o200k_base")
RARE_EVERY = 20  # one synthetic rare word per this many words
ZIPF_A = 1.3
DOC_BYTES = (1_000, 16_000)
FILE_BYTES = 256 << 20  # JSONL files of the generated corpus
TRAIN_STEPS = 2  # training steps at the 200m shape (the first is warm-up)
EVAL_WINDOWS = 4
LOADER_BATCHES = 5
UNITS = {"K": 1e3, "M": 1e6, "G": 1e9}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    scale = UNITS.get(text[-1:], 1.0)
    return int(float(text.rstrip("KMG")) * scale)


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


# ---------------------------------------------------------------- the study's size and limits


def study(config: dict[str, Any]) -> dict[str, Any]:
    """What the study asks of each step (the plan's figures) and the limits its config sets."""
    from leviathan.cells import config_cells
    from leviathan.cost import plan
    from leviathan.cost.plan import cell_memory
    from leviathan.data.encode import usable_cpus
    from leviathan.data.tokenizers import token_dtype
    from leviathan.study import actions, cluster
    from leviathan.study.corpus_size import fetch_max_bytes, vocab_budgets
    from leviathan.train.config import workflow_runtime
    from leviathan.vocab import get_vocab

    budgets = vocab_budgets(config)
    margin = 1 + float(config["corpus"]["size_margin"])
    cell_plans = [plan.plan_cell(config, c) for c in config_cells(config)]
    per_scale: dict[str, Any] = {}
    for p in cell_plans:
        best = per_scale.get(p.cell.scale)
        if best is None or (p.gpu_hours or 0) > (best.gpu_hours or 0):
            per_scale[p.cell.scale] = p
    return {
        "fetch_bytes": fetch_max_bytes(config),
        "tokenize_bytes": {v: actions.tokenize_options(config, v)["max_bytes"] for v in VOCABS},
        "tokens": {v: int(budgets[v] * margin) for v in VOCABS},
        "shard_bytes": {
            v: int(budgets[v] * margin) * token_dtype(get_vocab(v).n_vocab).itemsize for v in VOCABS
        },
        "word_count_tokens": (config["evaluate"].get("word_counts") or {}).get("max_train_tokens"),
        "rules": {
            r: {"threads": cluster.rule_threads(config, r), **cluster.rule_resources(config, r)}
            for r in ("fetch_corpus", "tokenize", "word_counts")
        },
        "scales": per_scale,
        "gpu_memory": {sc: cell_memory(config, p.cell)[0] for sc, p in per_scale.items()},
        "resources": {s: cluster.resources(config, s) for s in per_scale},
        "runtime": workflow_runtime(config.get("runtime")),
        "cpus_here": usable_cpus(),
        "tokenize_processes": (config.get("tokenize") or {}).get("processes"),
    }


# ---------------------------------------------------------------- the table


def _t(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _mb(rss: float) -> str:
    return f"{rss / 1024:.1f} GB" if rss >= 1024 else f"{rss:.0f} MB"


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(
        self,
        step: str,
        measured: str,
        time_s: float | None,
        time_limit_s: float | None,
        rss_mb: float | None = None,
        mem_limit_mb: float | None = None,
        note: str = "",
    ) -> None:
        over = (time_s is not None and time_limit_s is not None and time_s > time_limit_s) or (
            rss_mb is not None and mem_limit_mb is not None and rss_mb > mem_limit_mb
        )
        self.rows.append(
            {
                "step": step,
                "measured": measured,
                "predicted_s": time_s,
                "predicted_rss_mb": rss_mb,
                "limit_s": time_limit_s,
                "limit_mem_mb": mem_limit_mb,
                "verdict": "OVER" if over else "ok",
                "note": note,
            }
        )

    def render(self) -> str:
        lines = [
            "| step | measured | predicted at the study | limit (config) | verdict |",
            "|---|---|---|---|---|",
        ]
        for r in self.rows:
            pred = [_t(r["predicted_s"])] if r["predicted_s"] is not None else []
            if r["predicted_rss_mb"] is not None:
                pred.append(_mb(r["predicted_rss_mb"]))
            lim = [_t(r["limit_s"])] if r["limit_s"] is not None else []
            if r["limit_mem_mb"] is not None:
                lim.append(_mb(r["limit_mem_mb"]))
            note = f" ({r['note']})" if r["note"] else ""
            lines.append(
                f"| {r['step']} | {r['measured']} | {', '.join(pred)}{note} | "
                f"{', '.join(lim) or '-'} | {r['verdict']} |"
            )
        return "\n".join(lines)

    @property
    def over(self) -> bool:
        return any(r["verdict"] == "OVER" for r in self.rows)


def disk_line(config: dict[str, Any]) -> str:
    """The study's disk estimate, from the plan's own counters (leviathan.cost.plan)."""
    from leviathan.cost.disk import study_disk

    return study_disk(config).line()


def _cpu(step: dict[str, Any], key: str = "cpu_s") -> float:
    """A step's CPU seconds, at least the clock's resolution (a tiny rehearsal may read 0)."""
    return max(float(step[key]), 1e-6)


def build_table(m: dict[str, Any], s: dict[str, Any], config: dict[str, Any]) -> Table:
    """One row per step: measured, predicted at the study, and the limit its config gives."""
    t = Table()
    step_s = {sc: p.gpu_hours * 3600 / p.gpus / p.steps for sc, p in s["scales"].items()}
    _data_rows(t, m, s)
    _run_start_rows(t, m, s, step_s)
    _train_rows(t, m, s, step_s)
    _eval_rows(t, m, s, config)
    return t


def _data_rows(t: Table, m: dict[str, Any], s: dict[str, Any]) -> None:
    """Fetch, then tokenize, counts and word counts of each vocabulary (CPU steps)."""
    rules = s["rules"]
    f = m["fetch"]
    rate = f["bytes"] / _cpu(f)  # one CPU: the fetch is one process
    t.add(
        "fetch (local files, resumable parts)",
        f"{rate / 1e6:.1f} MB/s, {_mb(f['rss_mb'])}",
        s["fetch_bytes"] / rate,
        rules["fetch_corpus"]["runtime"] * 60,
        f["rss_mb"],
        rules["fetch_corpus"]["mem_mb"],
        f"{s['fetch_bytes'] / 1e9:.0f} GB of train text",
    )
    job_cpus = rules["tokenize"]["threads"]
    for v in VOCABS:
        tk = m["tokenize"][v]
        rate = tk["bytes"] / _cpu(tk)  # per CPU; the job runs one process per CPU
        procs = s["tokenize_processes"] or job_cpus
        t.add(
            f"tokenize {v} (+ counts)",
            f"{rate / 1e6:.2f} MB/s per CPU, {_mb(tk['rss_mb'])}, "
            f"{tk['bytes'] / tk['tokens']:.2f} B/token",
            s["tokenize_bytes"][v] / (rate * job_cpus),
            rules["tokenize"]["runtime"] * 60,
            tk["rss_mb"] * procs / tk["processes"],
            rules["tokenize"]["mem_mb"],
            f"{s['tokenize_bytes'][v] / 1e9:.1f} GB on {job_cpus} CPUs",
        )
    for v in VOCABS:
        c = m["counts"][v]
        rate = c["tokens"] / _cpu(c)
        t.add(
            f"counts {v} (from a shard)",
            f"{rate / 1e6:.0f} M tokens/s, {_mb(c['rss_mb'])}",
            s["tokens"][v] / rate,
            rules["tokenize"]["runtime"] * 60,
            c["rss_mb"],
            rules["tokenize"]["mem_mb"],
        )
    for v in VOCABS:
        w = m["word_counts"][v]
        rate = w["tokens"] / _cpu(w)
        n = min(s["word_count_tokens"] or s["tokens"][v], s["tokens"][v])
        t.add(
            f"word counts {v}",
            f"{rate / 1e6:.2f} M tokens/s, {_mb(w['rss_mb'])}",
            n / rate,
            rules["word_counts"]["runtime"] * 60,
            w["rss_mb"],
            rules["word_counts"]["mem_mb"],
            f"{n / 1e9:.1f}B train tokens; memory bounded",
        )


def _run_start_rows(
    t: Table, m: dict[str, Any], s: dict[str, Any], step_s: dict[str, float]
) -> None:
    """The loader against the fastest GPU step; the run-start shard checks against the
    process group's timeout."""
    fastest = min(step_s, key=lambda k: step_s[k])
    lo = m["loader"]
    t.add(
        "loader, global batch 512 x 512",
        f"{_t(lo['cpu_s'])}/batch, {_mb(lo['rss_mb'])}",
        lo["cpu_s"],
        step_s[fastest],
        note=f"per step, against the {fastest} GPU step",
    )
    rs = m["run_start"]
    o200k = s["shard_bytes"]["o200k_base"]
    timeout = s["runtime"].dist_timeout_s
    t.add(
        "run start: size + sampled fingerprint",
        _t(rs["sampled_s"]),
        rs["sampled_s"],
        timeout,
        note="constant in the shard size",
    )
    rate = rs["bytes"] / _cpu(rs, "full_cpu_s")
    t.add(
        "run start: full sha256 (verify_shards=full)",
        f"{rate / 1e9:.2f} GB/s",
        o200k / rate,
        timeout,
        note=f"{o200k / 1e9:.0f} GB o200k shard, before the group is joined",
    )


def _train_rows(t: Table, m: dict[str, Any], s: dict[str, Any], step_s: dict[str, float]) -> None:
    """Training of each scale from the plan's FLOPs; checkpoint save and load of the largest
    state against the interval between checkpoints."""
    tr = m["train"]
    for sc, p in s["scales"].items():
        res = s["resources"][sc]
        t.add(
            f"train {p.cell.key} ({p.gpus} x {p.gpu_model})",
            f"200m on CPU: {_t(tr['seconds'])}/step of 512 tokens, {_mb(tr['rss_mb'])}"
            if sc == "200m"
            else "-",
            p.gpu_hours * 3600 / p.gpus,
            res["runtime"] * 60,
            note=f"{p.steps:,} steps, plan at MFU {p.mfu:.0%} ({p.mfu_source})",
        )
        gpu = s["gpu_memory"].get(sc)
        if gpu is not None and gpu.gpu is not None:
            t.add(
                f"GPU memory per GPU, train {p.cell.key} ({gpu.gpu.name})",
                "-",
                None,
                None,
                rss_mb=gpu.total / 2**20,
                mem_limit_mb=gpu.gpu.memory / 2**20,
                note="its step traced on FakeTensors + allowances (leviathan.cost.memory)",
            )
    ck = m["checkpoint"]
    big = s["scales"].get("1.2b") or max(s["scales"].values(), key=lambda p: p.params)
    save_rate, load_rate = ck["bytes"] / ck["save_s"], ck["bytes"] / ck["load_s"]
    interval = s["runtime"].checkpoint.every * step_s[big.cell.scale]
    for what, rate in (("save", save_rate), ("load", load_rate)):
        t.add(
            f"checkpoint {what}, {big.cell.scale} state ({big.checkpoint_bytes / 1e9:.1f} GB)",
            f"200m ({ck['bytes'] / 1e9:.2f} GB): {rate / 1e9:.2f} GB/s, {_mb(ck['rss_mb'])}",
            big.checkpoint_bytes / rate,
            interval,
            note=f"against checkpoint.every={s['runtime'].checkpoint.every} steps of training",
        )


def _eval_rows(t: Table, m: dict[str, Any], s: dict[str, Any], config: dict[str, Any]) -> None:
    """The plan's own validation job of each scale: the configured sample, one GPU of
    eval_resources.<scale>, its time limit."""
    from leviathan.cost import plan_eval

    ev = m["eval"]
    val_share = m["fetch"]["val_bytes"] / m["fetch"]["bytes"]
    for sc, p in s["scales"].items():
        val = next(e for e in plan_eval.plan_evals(config, p.cell) if e.evaluation == "val")
        if val.gpu_hours is not None:
            predicted, what = val.gpu_hours * 3600, f"{val.tokens / 1e9:.3f}B val tokens (sample)"
        else:  # the whole split (size unknown before it is tokenized) or a CPU job
            tokens = val.tokens or s["tokens"][p.cell.vocab] * val_share
            fwd = p.train_flops / p.tokens / 3  # forward FLOPs per token
            predicted = tokens * fwd * p.gpu_hours * 3600 / p.train_flops
            what = f"{tokens / 1e9:.2f}B val tokens at the training MFU"
        t.add(
            f"eval val {sc} (1 GPU, eval_resources.{sc})",
            f"200m on CPU: {_t(ev['seconds'])}/window of 512, {_mb(ev['rss_mb'])}"
            if sc == "200m"
            else "-",
            predicted,
            val.runtime_hours * 3600,
            note=what,
        )


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="2G", help="text to build and process (e.g. 2G, 50M)")
    ap.add_argument("--work", type=Path, help="work directory (default: a temp dir, removed)")
    ap.add_argument("--json", type=Path, help="also write the measurements and table here")
    ap.add_argument("--config", type=Path, default=PAPER, help="the study (config/paper.yaml)")
    ap.add_argument(
        "--measured", type=Path, help="print the table of an earlier run's measurements (--json)"
    )
    args = ap.parse_args(argv)
    from leviathan.study.config import resolve

    config = resolve([args.config], root=ROOT)
    if args.measured:
        m = json.loads(args.measured.read_text())["measured"]
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="rehearse-"))
        try:
            m = run_steps(work, parse_size(args.size), work / "measured.partial.json")
        finally:
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
    table = build_table(m, study(config), config)
    print(
        f"rehearsal at {m['corpus']['text_bytes'] / 1e9:.2f} GB of text; study: {args.config.name}"
    )
    print(table.render())
    print(disk_line(config))
    if args.json and not args.measured:
        args.json.write_text(
            json.dumps({"measured": m, "table": table.rows}, indent=1, default=str)
        )
    if table.over:
        print("rehearse: a prediction exceeds its configured limit (OVER above)", file=sys.stderr)
    return 1 if table.over else 0


if __name__ == "__main__":
    sys.exit(main())

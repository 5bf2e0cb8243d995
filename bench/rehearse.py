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

The steps are in rehearse_steps.py, the table in rehearse_table.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # its sibling modules, however it is loaded
    sys.path.insert(0, str(BENCH))
from rehearse_steps import VOCABS, run_steps  # noqa: E402
from rehearse_table import Table, build_table, disk_line  # noqa: E402

__all__ = ["Table", "build_table", "main", "parse_size", "run_steps", "study"]

ROOT = BENCH.parent
PAPER = ROOT / "config" / "paper.yaml"
UNITS = {"K": 1e3, "M": 1e6, "G": 1e9}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    scale = UNITS.get(text[-1:], 1.0)
    return int(float(text.rstrip("KMG")) * scale)


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

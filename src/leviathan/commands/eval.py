"""`leviathan eval ...`: evaluation outputs (JSON) from checkpoints, shards and runs.

    leviathan eval val --checkpoint RUN --val val.bin [--counts counts.npy]
                       [--word-counts word_counts.json] --out val.json
                       (running sums kept beside --out every persist_seconds: a rerun of a
                       killed evaluation continues from them)
    leviathan eval word-counts --train train.bin --val val.bin --out word_counts.json
    leviathan eval wikitext --checkpoint RUN [--data-files test=wiki.test.parquet] --out wikitext.json
    leviathan eval lm-eval --checkpoint RUN [--tasks hellaswag piqa ...]
                           [--task-data piqa:validation=piqa.jsonl ...] --out lm_eval.json
    leviathan eval sample-efficiency --baseline TIED_RUN --run RUN [--run RUN ...] --out se.json

`--config FILE` reads `val:`, `wikitext:` and `lm_eval:` sections (see
`leviathan.eval.config`); flags given on the command line override them. Each command
prints a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from leviathan.eval.config import PAPER_TASKS, EvalConfig, LocalTaskData
from leviathan.eval.errors import EvalInputError
from leviathan.eval.run import EvalFiles, run_evaluation
from leviathan.layout import eval_partial, lm_eval_samples
from leviathan.provenance import utc_now
from leviathan.values import split_assignment


def _common_model(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        required=True,
        type=Path,
        help="run directory (uses checkpoints/final) or a checkpoint directory",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="auto: bf16 autocast on CUDA, fp32 on CPU",
    )
    p.add_argument("--config", type=Path, help="YAML with val:/wikitext:/lm_eval: sections")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--out", required=True, type=Path, help="output JSON (written atomically)")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "eval",
        help="evaluate checkpoints: val loss, frequency buckets, WikiText-103, lm-eval, sample efficiency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ev = p.add_subparsers(dest="eval_command", required=True, metavar="EVAL_COMMAND")
    _add_val(ev)
    _add_word_counts(ev)
    _add_wikitext(ev)
    _add_lm_eval(ev)
    _add_lm_eval_tasks(ev)
    _add_sample_efficiency(ev)


def _add_val(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    v = ev.add_parser(
        "val",
        help="loss/perplexity/bits per byte over the whole validation split (+ frequency buckets)",
    )
    _common_model(v)
    v.add_argument(
        "--val", required=True, type=Path, help="validation token shard (.bin with manifest)"
    )
    v.add_argument(
        "--counts",
        type=Path,
        help="training counts (counts.npy): adds token-level frequency buckets",
    )
    v.add_argument(
        "--word-counts", type=Path, help="`eval word-counts` output: adds word-level buckets"
    )
    v.add_argument("--context", type=int, help="window length (default: the training context)")
    v.add_argument(
        "--max-windows", type=int, help="evaluate only the first N windows (default: all)"
    )
    v.add_argument("--quantile-bins", type=int)
    v.add_argument(
        "--persist-seconds",
        type=float,
        help="running sums saved this often beside --out (a killed evaluation rerun continues)",
    )
    v.set_defaults(func=_locked(run_val))


def _add_word_counts(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    w = ev.add_parser("word-counts", help="training-corpus counts of the validation text's words")
    w.add_argument("--train", required=True, type=Path)
    w.add_argument("--val", required=True, type=Path)
    w.add_argument("--max-train-tokens", type=int, help="count only the first N training tokens")
    w.add_argument("--out", required=True, type=Path)
    w.set_defaults(func=_locked(run_word_counts))


def _add_wikitext(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    t = ev.add_parser(
        "wikitext",
        help="WikiText-103 zero-shot perplexity by lm-eval's wikitext task (word, byte, bits per byte)",
    )
    _common_model(t)
    t.add_argument("--dataset", help="HF dataset id (default EleutherAI/wikitext_document_level)")
    t.add_argument("--name", help="dataset config (default wikitext-103-raw-v1)")
    t.add_argument("--split", help="split (default test)")
    t.add_argument(
        "--data-files",
        action="append",
        default=[],
        metavar="SPLIT=FILE",
        help="local files instead of the Hub (repeatable), e.g. test=wiki.test.parquet",
    )
    t.add_argument("--builder", help="format of --data-files (inferred from the extension)")
    t.add_argument("--context", type=int)
    t.add_argument(
        "--stride", type=int, help="stride of the secondary stream figure (default: the context)"
    )
    t.set_defaults(func=_locked(run_wikitext))


def _add_lm_eval(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lm = ev.add_parser(
        "lm-eval", help="zero-shot lm-evaluation-harness tasks (the paper's six by default)"
    )
    _common_model(lm)
    lm.add_argument(
        "--tasks", nargs="+", help=f"lm-eval task names (default: {' '.join(PAPER_TASKS)})"
    )
    lm.add_argument(
        "--task-data",
        action="append",
        default=[],
        metavar="TASK:SPLIT=FILE",
        help="local data file of a task in the official schema (repeatable)",
    )
    lm.add_argument("--limit", type=int, help="first N documents per task (testing only)")
    lm.add_argument("--num-fewshot", type=int)
    lm.add_argument("--bootstrap-iters", type=int)
    lm.add_argument(
        "--samples", type=Path, help="per-sample log JSONL (default: OUT with .samples.jsonl)"
    )
    lm.set_defaults(func=_locked(run_lm_eval))


def _add_lm_eval_tasks(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lt = ev.add_parser(
        "lm-eval-tasks",
        help="lm-eval task YAMLs on a workflow config's local data (--include_path)",
        description="Write one <task>.yaml per task of evaluate.lm_eval.data: lm-eval's official "
        "task (included) pointed at the same local files, for lm-eval's own CLI with any model: "
        "lm_eval --model hf ... --include_path OUT --tasks piqa",
    )
    lt.add_argument(
        "--configfile",
        action="append",
        default=[],
        metavar="FILE",
        help="workflow config (default: config/config.yaml), resolved as Snakemake does",
    )
    lt.add_argument("--out", required=True, type=Path)
    lt.set_defaults(func=_locked(run_lm_eval_tasks))


def _add_sample_efficiency(ev: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = ev.add_parser(
        "sample-efficiency", help="tokens each run needs to reach the baseline's final val loss"
    )
    s.add_argument("--baseline", required=True, type=Path, help="the tied baseline's run directory")
    s.add_argument(
        "--run", required=True, action="append", type=Path, help="run directory (repeatable)"
    )
    s.add_argument("--out", required=True, type=Path)
    s.set_defaults(func=_locked(run_sample_efficiency))


def _locked(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One process per evaluation output: `--out` is locked while it is computed (a second
    process on it is refused in one line, `leviathan.lock`)."""

    def locked(args: argparse.Namespace) -> int:
        from leviathan.lock import hold_lock

        with hold_lock(args.out, "evaluation output", folder=False):
            return run(args)

    return locked


def _overrides(args: argparse.Namespace, *fields: str) -> dict[str, Any]:
    """The config fields given on the command line (each flag is named as its field)."""
    return {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}


def _file_pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    """`KEY=FILE` items of a repeatable flag as (key, file) pairs, in order."""
    return [
        split_assignment(item, f"{flag} {item!r}", "KEY=FILE", need_value=True) for item in items
    ]


def _print(summary: dict[str, Any]) -> None:
    print(json.dumps(summary, sort_keys=True))


def _evaluate(
    args: argparse.Namespace, evaluation: str, settings: Any, started: Any, files: EvalFiles
) -> dict[str, Any]:
    """Open `--checkpoint` on `--device` at `--precision` and run one evaluation of it."""
    from leviathan.eval.checkpoint import open_checkpoint

    ckpt, model = open_checkpoint(args.checkpoint, args.device, args.precision)
    return run_evaluation(evaluation, ckpt, model, settings, started, files)


def _write(path: Path, out: dict[str, Any], **summary: Any) -> int:
    """Write a command's result JSON (atomically) and print its one-line summary."""
    from leviathan.eval.results import write_result

    write_result(path, out)
    _print({"out": str(path), **summary})
    return 0


def run_val(args: argparse.Namespace) -> int:
    started = utc_now()
    cfg = EvalConfig.from_file(args.config).val
    cfg = replace(
        cfg,
        **_overrides(
            args, "context", "batch_size", "max_windows", "quantile_bins", "persist_seconds"
        ),
    )
    partial = eval_partial(args.out)  # where the workflow's val rule keeps its sums too
    files = EvalFiles(
        val=args.val, counts=args.counts, word_counts=args.word_counts, partial=partial
    )
    out = _evaluate(args, "val", cfg, started, files)
    o = out["results"]["overall"]
    keys = ("loss", "perplexity", "bits_per_byte", "targets", "tokens_per_s", "resumed_windows")
    code = _write(args.out, out, **{k: o[k] for k in keys})
    partial.unlink(missing_ok=True)
    return code


def run_word_counts(args: argparse.Namespace) -> int:
    from leviathan.eval.val import build_word_counts

    started = utc_now()
    out = build_word_counts(
        args.train, args.val, max_train_tokens=args.max_train_tokens, started=started
    )
    r = out["results"]
    return _write(args.out, out, **{k: r[k] for k in ("val_word_types", "train_tokens_counted")})


def run_wikitext(args: argparse.Namespace) -> int:
    started = utc_now()
    cfg = EvalConfig.from_file(args.config).wikitext
    changes = _overrides(
        args, "dataset", "name", "split", "builder", "context", "stride", "batch_size"
    )
    if args.data_files:
        files: dict[str, list[str]] = {}
        for split, f in _file_pairs(args.data_files, "--data-files"):
            files.setdefault(split, []).append(f)
        changes["data_files"] = files
    cfg = replace(cfg, **changes)
    out = _evaluate(args, "wikitext", cfg, started, EvalFiles())
    r = out["results"]
    return _write(
        args.out,
        out,
        **{k: r[k] for k in ("word_perplexity", "byte_perplexity", "bits_per_byte", "documents")},
        stream_token_perplexity=r["stream"]["token_perplexity"],
        tokens=r["stream"]["tokens"],
    )


def run_lm_eval(args: argparse.Namespace) -> int:
    started = utc_now()
    cfg = EvalConfig.from_file(args.config).lm_eval
    changes = _overrides(args, "limit", "num_fewshot", "bootstrap_iters", "batch_size")
    if args.tasks:
        changes["tasks"] = tuple(args.tasks)
    changes["data"] = _task_data(cfg.data, args.task_data)
    cfg = replace(cfg, **changes)
    samples = args.samples or lm_eval_samples(args.out)
    out = _evaluate(args, "lm_eval", cfg, started, EvalFiles(samples=samples))
    tasks = out["results"]["tasks"]
    return _write(
        args.out,
        out,
        samples=str(samples),
        mean_acc=out["results"]["mean_acc"],
        acc={t: v["metrics"].get("acc,none") for t, v in tasks.items()},
    )


def _task_data(data: dict[str, LocalTaskData], items: list[str]) -> dict[str, LocalTaskData]:
    """The config's local task data with each `--task-data TASK:SPLIT=FILE` added to the task's
    files of that split (after the config's own)."""
    data = dict(data)
    for key, f in _file_pairs(items, "--task-data"):
        task, sep, split = key.partition(":")
        if not sep or not split:
            raise EvalInputError(
                f"--task-data {key}={f}: expected TASK:SPLIT=FILE, e.g. piqa:validation=piqa.jsonl"
            )
        files = dict(data[task].data_files) if task in data else {}
        files[split] = [
            *([files[split]] if isinstance(files.get(split), str) else files.get(split, [])),
            f,
        ]
        data[task] = LocalTaskData(files, data[task].builder if task in data else None)
    return data


def run_lm_eval_tasks(args: argparse.Namespace) -> int:
    from leviathan.eval.config import eval_config
    from leviathan.eval.lm_eval_tasks import write_local_tasks
    from leviathan.study.config import resolve

    cfg = eval_config(resolve(args.configfile)).lm_eval
    if not cfg.data:
        raise ValueError(
            "the config's evaluate.lm_eval.data names no local files: its tasks read the Hub "
            "(lm-eval's own task names work as they are)"
        )
    paths = write_local_tasks(cfg, args.out)
    _print(
        {
            "out": str(args.out),
            "tasks": [p.stem for p in paths],
            "use": f"--include_path {args.out} --tasks {','.join(p.stem for p in paths)}",
        }
    )
    return 0


def run_sample_efficiency(args: argparse.Namespace) -> int:
    from leviathan.eval.sample_efficiency import sample_efficiency

    started = utc_now()
    out = sample_efficiency(args.baseline, args.run, started=started)
    return _write(
        args.out,
        out,
        target_val_loss=out["results"]["baseline"]["target_val_loss"],
        ratios={r["run"]: r["ratio"] for r in out["results"]["runs"]},
    )

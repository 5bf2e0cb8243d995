"""Zero-shot benchmarks through lm-evaluation-harness, with lm-eval's own task definitions.

Each task is lm-eval's official YAML (found through lm-eval's TaskManager; `include`s and
`!function`s resolved by lm-eval's loader). For machines without the Hub, `lm_eval.data`
points a task at local files in the schema of its official dataset; only the dataset
location changes: `dataset_path` becomes the file format (json, parquet, ...),
`dataset_name` null, `dataset_kwargs.data_files` the files, and the official split names
that have no file are set to null. The split lm-eval scores (the official test split where
the task has one, else validation) must be among the files. Prompts, targets, metrics,
filters and versions are untouched. A task without local files needs the Hub: if it is
unreachable the run stops before any download with a message naming the config key.

Official evaluation splits and schemas (lm-eval 0.4.x):
  hellaswag       Rowan/hellaswag          validation  ind, activity_label, ctx_a, ctx_b, ctx,
                                                       endings[4], source_id, split, split_type, label ("0".."3")
  arc_easy        allenai/ai2_arc ARC-Easy test        id, question, choices{text[], label[]}, answerKey
  arc_challenge   allenai/ai2_arc ARC-Challenge test   (as arc_easy)
  piqa            baber/piqa               validation  goal, sol1, sol2, label (0/1)
  winogrande      allenai/winogrande xl    validation  sentence (with "_"), option1, option2, answer ("1"/"2")
  lambada_openai  EleutherAI/lambada_openai test       text

The output keeps lm-eval's version, each task's results, version, n-shot, effective sample
count, config and task hash (sha256 over the per-sample doc/prompt/target hashes, as
lm-eval's EvaluationTracker computes it), and the per-sample logs (a JSONL file beside it).
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.eval.checkpoint import Checkpoint, EvalModel
from leviathan.eval.config import (
    PAPER_TASKS,
    LmEvalConfig,
    LocalTaskData,
    infer_builder,
    normalise_data_files,
)
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.hub import is_connection_error, offline_mode, require_hub
from leviathan.eval.results import envelope
from leviathan.eval.standin import STAND_IN_ALIAS, is_stand_in
from leviathan.io import atomic_path, sha256_file
from leviathan.provenance import utc_now

# lm-eval's task directory of each paper task (indexing only these is ~10x faster than the
# whole catalogue; any other lm-eval task name falls back to the full index)
TASK_DIRS = {
    "hellaswag": "hellaswag",
    "arc_easy": "arc",
    "arc_challenge": "arc",
    "piqa": "piqa",
    "winogrande": "winogrande",
    "lambada_openai": "lambada",
    "wikitext": "wikitext",
}
SPLIT_KEYS = ("training_split", "validation_split", "test_split")


def lm_eval_version() -> str:
    import lm_eval

    return str(getattr(lm_eval, "__version__", "unknown"))


def task_manager(tasks: tuple[str, ...] | list[str]) -> Any:
    """An lm-eval TaskManager that indexes the official definitions of `tasks`."""
    import lm_eval.tasks as lm_tasks
    from lm_eval.tasks import TaskManager

    root = Path(lm_tasks.__file__).parent
    dirs = sorted({TASK_DIRS[t] for t in tasks if t in TASK_DIRS})
    if all(t in TASK_DIRS for t in tasks) and all((root / d).is_dir() for d in dirs):
        tm = TaskManager(include_defaults=False, include_path=[str(root / d) for d in dirs])
        if all(t in tm.task_index for t in tasks):
            return tm
    return TaskManager()


def official_config(tm: Any, task: str) -> dict[str, Any]:
    """lm-eval's own config of `task` (YAML with includes and !function resolved)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = tm.task_index.get(task)
    if (
        entry is None
        or entry.yaml_path is None
        or str(getattr(entry.kind, "name", entry.kind)) not in ("TASK",)
    ):
        raise EvalInputError(
            f"unknown lm-eval task {task!r}: the paper's tasks are {', '.join(PAPER_TASKS)} "
            f"(any single lm-eval {lm_eval_version()} task defined by a YAML file also works)"
        )
    cfg: dict[str, Any] = load_yaml(entry.yaml_path, resolve_func=True)
    cfg.pop("tag", None)
    cfg.pop("group", None)
    cfg["task"] = task
    cfg.setdefault("metadata", {})
    if not isinstance(cfg["metadata"], dict):
        cfg["metadata"] = {"_metadata": cfg["metadata"]}
    cfg["metadata"]["official_config"] = str(entry.yaml_path)
    return cfg


def scored_split(cfg: dict[str, Any]) -> str:
    """The split lm-eval evaluates: test if the task has one, else validation."""
    split = cfg.get("test_split") or cfg.get("validation_split")
    if not split:
        raise EvalInputError(
            f"lm-eval task {cfg.get('task')!r} has neither a test nor a validation split"
        )
    return str(split)


def with_local_data(
    cfg: dict[str, Any], data: LocalTaskData
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The official config pointed at local files (only dataset location and splits change), and
    the record of those files (paths and sha256) for the evaluation's output."""
    out = local_config(cfg, data)
    files = out["dataset_kwargs"]["data_files"]
    source = {
        "kind": "local",
        "builder": out["dataset_path"],
        "official_dataset": cfg.get("dataset_path"),
        "official_name": cfg.get("dataset_name"),
        "data_files": {
            s: [{"path": f, "sha256": sha256_file(f)} for f in fs_] for s, fs_ in files.items()
        },
        "scored_split": scored_split(cfg),
    }
    return out, source


def local_config(cfg: dict[str, Any], data: LocalTaskData) -> dict[str, Any]:
    """The official config pointed at local files: only dataset location and splits change."""
    task = cfg["task"]
    where = f"lm_eval.data.{task}"
    files = normalise_data_files(data.data_files, where)
    need = scored_split(cfg)
    if need not in files:
        raise EvalInputError(
            f"{where}.data_files has split(s) {sorted(files)}, but lm-eval scores {task} on its "
            f"{need!r} split: give the file of the {need!r} split (official schema of "
            f"{cfg.get('dataset_path')})"
        )
    out = copy.copy(cfg)
    builder = infer_builder(files, data.builder, where)
    out["dataset_path"] = builder
    out["dataset_name"] = None
    out["dataset_kwargs"] = {"data_files": files}
    for key in SPLIT_KEYS:
        if out.get(key) is not None and out[key] not in files:
            out[key] = None
    fs = out.get("fewshot_config") or {}
    if isinstance(fs, dict) and fs.get("split") not in (None, *files):
        raise EvalInputError(f"{where}: the task's few-shot split {fs['split']!r} needs a file too")
    return out


def local_task_yaml(tm: Any, task: str, data: LocalTaskData) -> dict[str, Any]:
    """An lm-eval task YAML (for `--include_path`) that is lm-eval's official `task` pointed at
    local files: it `include`s the official YAML and changes only the dataset location and
    splits, as `with_local_data` does for our own runs (the YAML needs no hashes of the files)."""
    cfg = local_config(official_config(tm, task), data)
    out = {
        "include": str(tm.task_index[task].yaml_path),
        "task": task,
        "dataset_path": cfg["dataset_path"],
        "dataset_name": None,
        "dataset_kwargs": cfg["dataset_kwargs"],
    }
    out.update({key: cfg.get(key) for key in SPLIT_KEYS})
    return out


def write_local_tasks(cfg: LmEvalConfig, out_dir: str | os.PathLike[str]) -> list[Path]:
    """One `<task>.yaml` per task with local data in `out_dir`: lm-eval's own CLI then runs the
    same tasks on the same files with `--include_path out_dir` (any model, `hf` included). A
    task on the offline stand-ins (leviathan.eval.standin) gets the alias `<task> (stand-in)`,
    the name lm-eval's results table and JSON show it under."""
    import yaml

    tm = task_manager(list(cfg.data))
    written = []
    for task, data in cfg.data.items():
        local = local_task_yaml(tm, task, data)
        local["dataset_kwargs"] = {
            "data_files": {
                s: [str(Path(f).resolve()) for f in fs]
                for s, fs in local["dataset_kwargs"]["data_files"].items()
            }
        }
        if any(is_stand_in(f) for fs in local["dataset_kwargs"]["data_files"].values() for f in fs):
            local["task_alias"] = f"{task} {STAND_IN_ALIAS}"  # lm-eval's results name it so
        path = Path(out_dir) / f"{task}.yaml"
        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(local, sort_keys=False))
        written.append(path)
    return written


def build_tasks(
    cfg: LmEvalConfig,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    hub_fix: str | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], Any]:
    """lm-eval Task objects of the configured tasks, where each one's data came from, and
    the TaskManager that built them (pass it on to lm_eval.simple_evaluate). `overrides`
    change keys of a task's official config (e.g. WikiText-103 for lm-eval's WikiText-2
    dataset config) before any local data is substituted."""
    tm = task_manager(cfg.tasks)
    configs, sources = {}, {}
    for task in dict.fromkeys(cfg.tasks):
        official = {**official_config(tm, task), **(overrides or {}).get(task, {})}
        if task in cfg.data:
            configs[task], sources[task] = with_local_data(official, cfg.data[task])
        else:
            configs[task] = official
            sources[task] = {
                "kind": "hub",
                "dataset": official.get("dataset_path"),
                "name": official.get("dataset_name"),
                "scored_split": scored_split(official),
            }
    hub_tasks = [t for t, s in sources.items() if s["kind"] == "hub"]
    fix = hub_fix or (
        "Fetch them where the Hub is reachable with the data step (`snakemake all_data`, into "
        "data/eval/), or point each at local files in the official schema with the config key "
        "lm_eval.data.<task>.data_files (e.g. lm_eval.data.hellaswag.data_files: "
        "{validation: hellaswag/validation.jsonl}; CLI: --task-data hellaswag:validation=FILE)"
    )
    if hub_tasks:
        names = ", ".join(f"{t} ({sources[t]['dataset']})" for t in hub_tasks)
        require_hub(f"the data of lm-eval task(s) {names}", fix)
    tasks = {}
    for task, tcfg in configs.items():
        try:
            tasks[task] = tm.load([tcfg])["tasks"][task]
        except Exception as exc:
            if sources[task]["kind"] == "hub" and is_connection_error(exc):
                mode = (
                    " (HF_HUB_OFFLINE=1 and it is not in the local cache)" if offline_mode() else ""
                )
                raise HubUnreachable(
                    f"lm-eval task {task}: could not load {sources[task]['dataset']} from the "
                    f"Hugging Face Hub{mode}: {exc}. {fix}"
                ) from exc
            raise
    return tasks, sources, tm


def task_hash(samples: list[dict[str, Any]]) -> str:
    """lm-eval's task hash: sha256 over each sample's doc, prompt and target hashes."""
    from lm_eval.utils import hash_string

    return str(
        hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in samples))
    )


def _jsonable(obj: Any) -> Any:
    from lm_eval.utils import handle_non_serializable

    return json.loads(
        json.dumps(obj, default=handle_non_serializable, allow_nan=True),
        parse_constant=lambda c: None,
    )


@dataclass
class TaskRun:
    """What lm-eval returned for the configured tasks, in the form our outputs keep."""

    per_task: dict[
        str, dict[str, Any]
    ]  # task -> metrics, version, n-shot, counts, hash, data, config
    samples: dict[str, list[dict[str, Any]]]  # task -> lm-eval's per-sample logs
    inputs: list[dict[str, Any]]  # the local data files read, with sha256
    raw_config: dict[str, Any]  # lm-eval's own run config
    max_length: int


def evaluate_tasks(
    ckpt: Checkpoint,
    model: EvalModel,
    cfg: LmEvalConfig,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    hub_fix: str | None = None,
    tracker: Any = None,
    cache: str | None = None,
) -> TaskRun:
    """Run lm-eval's own `simple_evaluate` on the configured tasks through our model
    (`tracker`: an lm-eval EvaluationTracker that records the run, as its CLI does; `cache`:
    lm-eval's request cache, its `use_cache` prefix: every answered request is stored as it
    comes, so a rerun after a kill computes only the requests it lacks)."""
    import lm_eval

    from leviathan.eval.lm_eval_adapter import LeviathanLM

    tasks, sources, tm = build_tasks(cfg, overrides, hub_fix)
    lm = LeviathanLM(
        loaded=(ckpt, model),
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        max_gen_toks=cfg.max_gen_toks,
    )
    raw = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(tasks.values()),
        num_fewshot=cfg.num_fewshot,
        limit=cfg.limit,
        bootstrap_iters=cfg.bootstrap_iters,
        log_samples=True,
        random_seed=cfg.seed,
        numpy_random_seed=cfg.seed,
        torch_random_seed=cfg.seed,
        fewshot_random_seed=cfg.seed,
        task_manager=tm,
        evaluation_tracker=tracker,
        use_cache=cache,
    )
    if raw is None:
        raise RuntimeError("lm-eval returned no results (not rank 0?)")
    samples = raw.pop("samples", None) or {}
    if tracker is not None:
        _save_harness_files(tracker, raw, samples)
    per_task = {task: _task_record(raw, task, samples, sources[task]) for task in tasks}
    return TaskRun(
        per_task,
        samples,
        _local_inputs(sources),
        _jsonable(dict(raw.get("config") or {})),
        lm.max_length,
    )


def _save_harness_files(tracker: Any, raw: dict[str, Any], samples: dict[str, Any]) -> None:
    """lm-eval's own files, as its CLI writes them: results_<date>.json and
    samples_<task>_<date>.jsonl."""
    tracker.save_results_aggregated(results=raw, samples=samples)
    for task in raw.get("configs", {}):
        if task in samples:
            tracker.save_results_samples(task_name=task, samples=samples[task])


def _task_record(
    raw: dict[str, Any], task: str, samples: dict[str, Any], source: dict[str, Any]
) -> dict[str, Any]:
    """What an output keeps of one task: metrics, version, n-shot, counts, hash, data, config."""
    task_res = raw["results"].get(task, {})
    metrics = {k: v for k, v in task_res.items() if "," in k}  # "<metric>,<filter>"
    return {
        "metrics": _jsonable(metrics),
        "sample_len": task_res.get("sample_len"),
        "version": raw.get("versions", {}).get(task),
        "n_shot": raw.get("n-shot", {}).get(task),
        "n_samples": raw.get("n-samples", {}).get(task),
        "higher_is_better": raw.get("higher_is_better", {}).get(task),
        "task_hash": task_hash(samples.get(task, [])),
        "data": source,
        "config": _jsonable(raw.get("configs", {}).get(task)),
    }


def _local_inputs(sources: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The local data files the tasks read, with their sha256, as an output's inputs."""
    return [
        {"role": f"lm_eval:{t}", "path": f["path"], "sha256": f["sha256"]}
        for t, s in sources.items()
        if s["kind"] == "local"
        for fs in s["data_files"].values()
        for f in fs
    ]


def write_samples(
    samples: Mapping[str, list[dict[str, Any]]], path: str | os.PathLike[str]
) -> dict[str, Any]:
    """lm-eval's per-sample logs as JSONL (one sample per line with its task), atomically;
    returns the record an output keeps of it (path, sha256, count)."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        for task, rows in samples.items():
            for row in rows:
                fh.write(json.dumps({"task": task, **_jsonable(row)}, sort_keys=True) + "\n")
    return {
        "path": str(path),
        "sha256": sha256_file(path),
        "count": sum(len(v) for v in samples.values()),
    }


def harness_tracker(out_dir: str | os.PathLike[str]) -> Any:
    """lm-eval's EvaluationTracker writing into `out_dir` (its `--output_path`), emptied first."""
    import shutil

    from lm_eval.loggers import EvaluationTracker

    shutil.rmtree(out_dir, ignore_errors=True)
    Path(out_dir).mkdir(parents=True)
    return EvaluationTracker(output_path=str(out_dir))


def harness_files(out_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The files lm-eval wrote under its output path, with their sha256."""
    return [
        {"path": str(p), "sha256": sha256_file(p)}
        for p in sorted(Path(out_dir).rglob("*"))
        if p.is_file()
    ]


def run_lm_eval(
    ckpt: Checkpoint,
    model: EvalModel,
    cfg: LmEvalConfig = LmEvalConfig(),
    samples_out: str | os.PathLike[str] | None = None,
    started: _dt.datetime | None = None,
    harness_dir: str | os.PathLike[str] | None = None,
    cache: str | None = None,
) -> dict[str, Any]:
    """Run lm-eval on the configured tasks; the `lm_eval` evaluation output.

    Per-sample logs go to `samples_out` (JSONL, one sample per line with its task), written
    atomically; the output records its path and sha256. `harness_dir`: lm-eval's own output
    layout too (what `--output_path DIR --log_samples` writes: results_<date>.json and
    samples_<task>_<date>.jsonl, read by lm-eval's tooling), recorded with their sha256.
    `started`: when the evaluation began, checkpoint loading included (default: now).
    `cache`: lm-eval's request cache (see `evaluate_tasks`).
    """
    started = started or utc_now()
    t0 = time.perf_counter()
    tracker = harness_tracker(harness_dir) if harness_dir is not None else None
    run = evaluate_tasks(ckpt, model, cfg, tracker=tracker, cache=cache)
    results: dict[str, Any] = {
        "lm_eval_version": lm_eval_version(),
        "tasks": run.per_task,
        "mean_acc": _mean_acc(run.per_task),
        "mean_acc_norm": _mean_acc(run.per_task, norm=True),
        "lm_eval_config": run.raw_config,
    }
    if samples_out is not None:
        results["samples"] = write_samples(run.samples, samples_out)
    if harness_dir is not None:
        results["harness_output"] = {"path": str(harness_dir), "files": harness_files(harness_dir)}
    config = {**cfg.to_dict(), "max_length": run.max_length, "precision": model.precision}
    return envelope(
        "lm_eval",
        checkpoint=ckpt,
        inputs=run.inputs,
        config=_jsonable(config),
        results=results,
        seconds=time.perf_counter() - t0,
        device=str(model.device),
        started=started,
    )


def _mean_acc(per_task: dict[str, dict[str, Any]], norm: bool = False) -> float | None:
    """Mean of the tasks' `acc` (the paper's average), over tasks that report one; with `norm`,
    each task's `acc_norm` where it has one (HellaSwag, ARC, PIQA), else its `acc`."""
    accs = []
    for t in per_task.values():
        m = t["metrics"]
        value = m.get("acc_norm,none", m.get("acc,none")) if norm else m.get("acc,none")
        if isinstance(value, (int, float)) and "acc,none" in m:
            accs.append(value)
    return sum(accs) / len(accs) if accs else None

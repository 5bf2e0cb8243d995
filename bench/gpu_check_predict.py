"""The GPU check's predictions and its summary (`bench/gpu_check.py`).

Each figure's prediction is computed before the figure is measured, at the shapes it measures
(micro-batch, distinct ids, widths) and for the GPU it runs on (`predicted_gpu`); no GPU is
needed to compute one. A prediction is a dict that mirrors its measurement: the same key holds
the predicted value of the measured one (`plan_<key>`: the plan's own roofline figure where it
differs), `none` names each measured value that has no prediction and why, `detail` holds the
parts a prediction is built from, `basis` says what it rests on. A prediction that raises is
recorded as its `error` and the figure is still measured.

The summary pairs every measured value with its prediction: figure, predicted, measured, and
measured / predicted.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import lev_predict

from leviathan.cost import lev_kernels as kernel_cost
from leviathan.cost.memory import train_memory
from leviathan.cost.plan_eval import EVAL_MFU_SHARE
from leviathan.gpus import GIB, gpu_model, require_gpu_model
from leviathan.model.accounting import account
from leviathan.model.config import ModelConfig

FALLBACK_GPU = "H200"  # the GPU predicted for where the device's model has no rates (and on CPU)
# what a figure was measured at, not a measurement
SHAPE_KEYS = frozenset({"micro_batch", "distinct_ids", "ids", "d_model", "vocab_size"})
# measured values with no model behind them, and why
NO_PREDICTION = {
    "compile_s": "no model of compile time (docs/gpu.md estimates 10-20 s per regional compile)",
    "launches_per_step": "no model of kernel launches: the first GPU run gives the counts",
    "plain_forward_backward_ms": "the plain path is the reference, timed once beside the kernels",
    "nats": "no model of bf16's loss error (no numeric target set)",
    "slowdown": "no model of the deterministic mode's cost (no numeric target set)",
}


def predicted_gpu(device: str) -> str:
    """The GPU the predictions are for: the device's model where LEV's kernel model has its
    rates (`cost.lev_kernels.GPU_RATES`), else FALLBACK_GPU."""
    model = gpu_model(device)
    return model.name if model and model.name in kernel_cost.GPU_RATES else FALLBACK_GPU


def guarded(predict: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`predict()`, or its error (printed with its traceback): a prediction never stops the
    measurement it is read against."""
    try:
        return predict()
    except Exception as e:
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"}


def none(*keys: str) -> dict[str, Any]:
    """The prediction of a figure whose measured `keys` have no model."""
    return {"none": {k: NO_PREDICTION[k] for k in keys}}


def training(
    cfg: ModelConfig, micro_batch: int, ids: float, fused: bool, gpu: str
) -> dict[str, Any]:
    """One optimizer step of `cfg` (the trainer's fused AdamW and clipping): step ms, tokens/s
    and MFU from the roofline (`fused`: compiled); for leviathan, the tied roofline's step plus
    LEV's work at the `ids` distinct ids measured (`lev_predict.step_ratio`), the plan's
    roofline (distinct ids bounded by the tokens) beside it. Peak memory from the memory plan."""
    line = lev_predict.step_roofline(cfg, micro_batch, fused)
    peak = require_gpu_model(gpu).bf16_flops
    memory = train_memory(cfg, micro_batch, 1, gpu)
    plan_s = line.seconds(gpu)
    out: dict[str, Any] = {"step_ms": 1e3 * plan_s}
    detail: dict[str, Any] = {"part_ms": {p.name: 1e3 * p.seconds(gpu) for p in line.parts}}
    if cfg.variant == "leviathan":
        lev = lev_predict.step_ratio(cfg, micro_batch, round(ids), gpu, fused)
        seconds = lev["tied_step"] + lev["lev_extra"]
        out = {"step_ms": 1e3 * seconds, "plan_step_ms": 1e3 * plan_s, "plan_mfu": line.mfu(gpu)}
        detail = {
            "tied_step_ms": 1e3 * lev["tied_step"],
            "lev_extra_ms": 1e3 * lev["lev_extra"],
            "lev_kernels_ms": 1e3 * (lev["forward"] + lev["backward"]),
            "ratio_net": lev["step_ratio_net"],  # without the tied table's work LEV replaces
            "plan_part_ms": detail["part_ms"],
        }
    seconds = out["step_ms"] / 1e3
    how = "compiled" if fused else "eager"
    return {
        "basis": f"roofline ({how}, one micro-batch per step)"
        + (" + LEV's work at the distinct ids measured" if cfg.variant == "leviathan" else "")
        + "; memory plan's traced peak",
        **out,
        "tokens_s": line.tokens / seconds,
        "mfu": line.model_flops / (seconds * peak),
        "peak_allocated_gb": (memory.traced + memory.logsumexp) / GIB,
        "detail": {**detail, "peak_job_gb": memory.total / GIB},
        **none("compile_s", "launches_per_step"),
    }


def step_ratio(
    cfg: ModelConfig, micro_batch: int, ids: float, fused: bool, gpu: str
) -> dict[str, Any]:
    """leviathan / tied step at `micro_batch` with `ids` distinct ids, and each variant's step
    (`training`). The ratio is LEV's work added to the whole tied step (an upper bound: the
    tied table's work stays in); `ratio_net` without it (`lev_predict.step_ratio`)."""
    tied = training(replace(cfg, variant="tied"), micro_batch, ids, fused, gpu)
    lev = training(cfg, micro_batch, ids, fused, gpu)
    return {
        "gpu": gpu,
        "basis": "LEV's work at the distinct ids measured added to the tied step (upper bound)",
        "ratio": lev["step_ms"] / tied["step_ms"],
        "detail": {"ratio_net": lev["detail"]["ratio_net"], "distinct_ids": ids},
        "tied": tied,
        "leviathan": lev,
    }


def materialize(cfg: ModelConfig, d_model: int, gpu: str) -> dict[str, Any]:
    """LEV materialize() of cfg's vocabulary at width `d_model` (`lev_predict`)."""
    seconds = lev_predict.materialize_seconds(cfg, d_model, gpu)
    return {"gpu": gpu, "basis": "lev_predict.materialize_seconds", "ms": 1e3 * seconds}


def lev_kernels(cfg: ModelConfig, ids: int, every: int, gpu: str) -> dict[str, Any]:
    """LEV's Triton kernels at `ids` distinct ids, and the forward over `every` ids
    (`cost.lev_kernels.cost_per_id`, `kernel_seconds`)."""
    cost = kernel_cost.cost_per_id(cfg.lev)
    seconds = {
        "forward_ms": kernel_cost.kernel_seconds(cost.forward, ids, gpu),
        "backward_ms": kernel_cost.kernel_seconds(cost.backward, ids, gpu),
        "materialize_forward_ms": kernel_cost.kernel_seconds(cost.forward, every, gpu),
    }
    return {
        "gpu": gpu,
        "basis": "cost.lev_kernels.cost_per_id, kernel_seconds",
        **{k: 1e3 * s for k, s in seconds.items()},
        **none("plain_forward_backward_ms"),
    }


def eval_tokens(cfg: ModelConfig, micro_batch: int, gpu: str) -> dict[str, Any]:
    """The plan's evaluation rate (`workflow.plan_eval.plan_evals`): EVAL_MFU_SHARE of the compiled
    training roofline's MFU at this micro-batch, over the forward FLOPs per token without the
    input (the table is materialised once)."""
    acc = account(cfg, cfg.max_seq_len)
    mfu = lev_predict.step_roofline(cfg, micro_batch, True).mfu(gpu)
    per_token = acc.forward_flops - acc.input_flops
    rate = require_gpu_model(gpu).bf16_flops * mfu * EVAL_MFU_SHARE
    return {
        "gpu": gpu,
        "basis": f"the plan's rule: {EVAL_MFU_SHARE} x the compiled training roofline's MFU",
        "tokens_s": rate / per_token,
        "detail": {"train_mfu": mfu},
    }


def bitwise(variants: tuple[str, ...]) -> dict[str, Any]:
    """Deterministic mode's claim: every variant reruns and resumes bitwise."""
    return {
        **dict.fromkeys(variants, True),
        "basis": "torch's deterministic algorithms; LEV's kernels own their rows (no atomics)",
    }


# ---- the summary ---------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaves(tree: dict[str, Any], path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path of the dict, key, value) of every non-dict value, `predicted` subtrees excluded."""
    for key, value in tree.items():
        if key == "predicted":
            continue
        if isinstance(value, dict):
            yield from _leaves(value, f"{path}{key}.")
        else:
            yield path, key, value


def _at(tree: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _row(figure: str, predicted: Any, measured: Any) -> dict[str, Any]:
    ratio = measured / predicted if _number(measured) and _number(predicted) and predicted else None
    return {"figure": figure, "predicted": predicted, "measured": measured, "ratio": ratio}


def _predicted_of(prediction: dict[str, Any], path: str, key: str) -> Any:
    """The prediction of the measured value `path` + `key`: a value, `none: <reason>`, or the
    error of a prediction that failed; None where there is neither (a gap)."""
    level = _at(prediction, path)
    if isinstance(level, dict) and key in level:
        return level[key]
    if isinstance(level, dict) and key in (level.get("none") or {}):
        return f"none: {level['none'][key]}"
    return _error(prediction)


def _verdict(value: Any) -> bool:
    """A number, or a yes/no (bitwise or not)."""
    return _number(value) or isinstance(value, bool)


def _compared(key: str, value: Any, predicted: Any) -> bool:
    """A measured value the summary shows: a number or a verdict, or a value not measured here
    (`not measured on CPU`) that has a prediction; not a shape or a message."""
    if key in SHAPE_KEYS or key == "error":
        return False
    return _verdict(value) or _number(predicted)


def figure_rows(name: str, figure: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's rows of one figure: each measured value beside its prediction, then the
    plan's figures (`plan_<key>`) and the predictions with no measurement beside them (the
    measurement failed, or did not run here)."""
    prediction = figure.get("predicted") or {}
    rows = []
    for path, key, value in _leaves(figure):
        predicted = _predicted_of(prediction, path, key)
        if _compared(key, value, predicted):
            rows.append(_row(f"{name}.{path}{key}", predicted, value))
    for path, key, value in _leaves(prediction):
        if {"detail", "none"} & set(path.split(".")) or not _verdict(value):
            continue
        measured_key, level = key.removeprefix("plan_"), _at(figure, path)
        label = f"{name}.{path}{measured_key}" + (" (plan)" if key != measured_key else "")
        if "error" in figure:
            rows.append(_row(label, value, f"error: {figure['error']}"))
        elif not isinstance(level, dict) or measured_key not in level:
            rows.append(_row(label, value, "not measured"))
        elif key != measured_key:
            rows.append(_row(label, value, level[measured_key]))
    if not rows:  # neither side gave a value: the figure's row says why
        rows.append(_row(name, _error(prediction) or "-", _error(figure) or "-"))
    return rows


def _error(tree: dict[str, Any]) -> str | None:
    return f"error: {tree['error']}" if "error" in tree else None


def summary(result: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The rows of every figure of `names` in `result`, in that order."""
    return [row for name in names if name in result for row in figure_rows(name, result[name])]


def shown(
    rows: Callable[..., list[dict[str, Any]]], *args: Any
) -> tuple[list[dict[str, Any]], str]:
    """`rows(*args)` and their table; a failure is the table's one line (printed with its
    traceback), never the end of the check."""
    try:
        made = rows(*args)
        return made, render(made)
    except Exception as e:
        traceback.print_exc()
        return [], f"(no table: {type(e).__name__}: {e})"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if _number(value):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 28 else text[:25] + "..."


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a table: figure, predicted, measured, measured / predicted."""
    width = max([len(r["figure"]) for r in rows] + [6])
    lines = [f"{'figure':<{width}}  {'predicted':>28}  {'measured':>28}  {'ratio':>7}"]
    for r in rows:
        cells = (_cell(r["predicted"]), _cell(r["measured"]), _cell(r["ratio"]))
        lines.append(f"{r['figure']:<{width}}  {cells[0]:>28}  {cells[1]:>28}  {cells[2]:>7}")
    return "\n".join(lines)

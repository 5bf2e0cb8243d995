"""The roofline's prediction of a run's pace and memory: the `predicted_*` ops of the cell map.

A run is given as the final checkpoint records it (its model and training config) and as its
metrics log's start record names its device (the device, the device count and the compile
flag); the prediction is that of the plan (leviathan.cost.roofline, leviathan.cost.memory).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from leviathan.gpus import gpu_model
from leviathan.model.config import ModelConfig
from leviathan.train.config import TrainConfig

# what the roofline predicts of a run (the throughput table's `predicted_<what>` columns)
PREDICTED = ("tokens_per_s", "step_s", "mfu", "peak_memory")


def predicted(what: str, a: Sequence[Any], b: Sequence[Any]) -> float:
    """The roofline's `what` for a run: a = [model config, training config] (as the final
    checkpoint records them), b = [device name, device count, compile flag (absent: eager)]."""
    model = gpu_model(str(b[0]))
    if model is None:
        return math.nan
    cfg = ModelConfig.from_dict(dict(a[0]))
    tc = TrainConfig.from_dict(dict(a[1]))
    gpus, compiled = int(b[1]), bool(b[2]) if len(b) > 2 else False
    per_rank = tc.global_batch // gpus
    if what == "peak_memory":
        return float(_allocated(cfg, tc.micro_batch, gpus, model.name))
    step = _roofline(cfg, tc.micro_batch, per_rank, compiled)
    step_s = step.seconds(model.name) * max(1, per_rank // tc.micro_batch)
    return {
        "step_s": step_s,
        "tokens_per_s": tc.tokens_per_step / step_s,
        "mfu": step.mfu(model.name),
    }[what]


@functools.cache
def _roofline(cfg: Any, micro: int, per_rank: int, compiled: bool) -> Any:
    # imported here: the roofline imports torch, and the workflow's parse imports this module
    from leviathan.cost.roofline import roofline

    return roofline(cfg, micro, per_rank, fused=compiled)


@functools.cache
def _allocated(cfg: Any, micro: int, gpus: int, gpu: str) -> int:
    """The training job's predicted allocated bytes per GPU (leviathan.cost.memory: the traced
    tensors and allowances, without fragmentation and the CUDA context a tensor count omits)."""
    # imported here: the cost models trace the model (torch), and the workflow's parse imports
    # this module
    from leviathan.cost.memory import train_memory

    job = train_memory(cfg, micro, gpus, gpu)
    return int(job.traced + job.logsumexp + job.ddp_buckets)

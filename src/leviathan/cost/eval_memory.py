"""An evaluation job's GPU memory: the trained model loaded and prepared (`EvalModel`) and one
batch of windows through it, traced on FakeTensors as a training step is
(`leviathan.cost.step_count`: no GPU, seconds), plus the stated allowances of
`leviathan.cost.memory` (the loss chunk's hidden temporary, the CUDA context and the
allocator's fragmentation). The plan prints it beside the training job's.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from leviathan.cost.memory import CUDA_CONTEXT_BYTES, JobMemory, loss_chunk_bytes
from leviathan.gpus import gpu_model

if TYPE_CHECKING:
    from leviathan.model.config import ModelConfig


def trace_eval(cfg: ModelConfig, batch: int) -> int:
    """Peak memory of an evaluation job's model and one batch of `batch` windows: the
    trained model loaded and prepared (`EvalModel`: a generated input materialised into its
    V x D table), then its per-token losses under bf16 autocast (what the evaluations score)."""
    from leviathan.cost.step_count import LiveMemory, distinct_ids, gpu_stand_in, random_batch
    from leviathan.eval.checkpoint import EvalModel
    from leviathan.model.language_model import build_model
    from leviathan.model.loss import DEFAULT_CHUNK_ELEMS

    with gpu_stand_in(distinct_ids(cfg, batch * cfg.max_seq_len)):
        memory = LiveMemory()
        with memory:
            prepared = EvalModel(build_model(cfg), "bf16", DEFAULT_CHUNK_ELEMS)
            ids, targets = random_batch(cfg, batch)
            prepared.token_losses(ids, targets)
    return memory.peak


@cache
def _eval_peak(cfg: Any, batch: int) -> int:
    return trace_eval(cfg, batch)


def eval_memory(cfg: Any, batch: int, model: str | None) -> JobMemory:
    """An evaluation job's peak (one GPU): the prepared model and one batch of windows."""
    return JobMemory(
        traced=_eval_peak(cfg, batch),
        logsumexp=loss_chunk_bytes(cfg, batch * cfg.max_seq_len),
        ddp_buckets=0,
        fixed=CUDA_CONTEXT_BYTES,
        gpu=gpu_model(model),
    )

"""GPU memory per job: a training job's peak on one GPU, from its step traced on FakeTensors (`leviathan.cost.step_count`: no GPU, seconds),
plus the stated allowances a trace cannot see, against the memory of the job's `gpu_model`
(`leviathan.gpus`); an evaluation job's (`cost/eval_memory.py`) is the same `JobMemory` of
its traced forward. The plan prints it; a training micro-batch that would not fit is refused
naming `train.<scale>.micro_batch` and the largest that fits.

Allowances (stated, not measured; the first GPU check's `torch.cuda.max_memory_allocated`
corrects them):
  * where the trace ran the chunked loss (Triton not importable here; a GPU runs the fused
    kernels, which hold no logits), inside its `torch.logsumexp` one fp32 temporary of a loss
    chunk's logits that no dispatch mode sees: `x - max`, exponentiated in place;
  * DDP (jobs of more than one GPU): its gradient buckets, a flat fp32 copy of every
    gradient (`gradient_as_bucket_view` is off: the trainer's DDP defaults);
  * FSDP (`resources.<scale>.parallel: fsdp`): the trace counts parameters, gradients, AdamW's
    moments and the compute copies of the weights at 1/world of their size
    (`step_count.LiveMemory`); added are the groups FSDP holds gathered (`leviathan.train.fsdp`:
    the root group, the head and the final norm, all step; the block computing and the
    one prefetched), in bf16, and, for the root and one block, their unsharded bf16 gradients
    and the fp32 copy reduce-scattered (reductions in fp32). LEV (its own group, gathered in
    fp32) is counted as if in the root: its weights take 2 bytes per parameter more than
    counted, its gradients, fp32 and reduced as they are, 2 less;
  * `FRAGMENTATION` of what the caching allocator holds beyond its live tensors;
  * `CUDA_CONTEXT_BYTES` per process (the CUDA context, cuBLAS workspaces, kernel images)
    and `NCCL_BYTES` per process of a multi-GPU job (NCCL's channel buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from leviathan.gpus import GIB, GPUModel, gpu_model

CUDA_CONTEXT_BYTES = 1 * GIB
NCCL_BYTES = 1 * GIB
FRAGMENTATION = 0.15


@dataclass(frozen=True)
class JobMemory:
    """One job's predicted peak on one GPU: the traced live tensors and each allowance."""

    traced: int
    logsumexp: int  # the loss chunk's hidden fp32 temporary
    ddp_buckets: int  # 0 on one GPU; FSDP: its gathered groups and reduce-scatter buffers
    fixed: int  # CUDA context (+ NCCL on several GPUs)
    gpu: GPUModel | None

    @property
    def total(self) -> int:
        allocated = self.traced + self.logsumexp + self.ddp_buckets
        return int(allocated * (1 + FRAGMENTATION)) + self.fixed

    @property
    def fits(self) -> bool | None:
        return None if self.gpu is None else self.total <= self.gpu.memory

    def cell(self) -> str:
        """`41.2/80 GB` (GiB, as the GPU reports them), or the total alone without a GPU."""
        used = f"{self.total / GIB:.1f}"
        return f"{used}/{self.gpu.memory / GIB:.0f} GB" if self.gpu else f"{used} GB"


def loss_chunk_bytes(cfg: Any, rows: int) -> int:
    """Bytes of the fp32 temporary torch.logsumexp allocates for one chunk of the chunked
    loss (GPU rule, as the loss sizes its chunks); 0 where the traced step ran the loss's
    fused kernels (what a GPU runs: no logits in memory, their G is in the trace)."""
    import torch

    from leviathan.cost.roofline import padded_vocab
    from leviathan.cost.step_count import fused_loss_available
    from leviathan.device import chunk_elems, forced_policy
    from leviathan.model.loss import DEFAULT_CHUNK_ELEMS

    if fused_loss_available():
        return 0
    with forced_policy("gpu"):
        budget = chunk_elems(torch.device("cpu"), DEFAULT_CHUNK_ELEMS)
    return min(rows, max(1, budget // padded_vocab(cfg))) * padded_vocab(cfg) * 4


@cache
def _train_peak(cfg: Any, micro_batch: int, world: int = 1) -> int:
    from leviathan.cost.step_count import trace_step

    return trace_step(cfg, micro_batch, count=False, world=world).peak_bytes


def fsdp_buffers(cfg: Any) -> int:
    """Bytes FSDP holds beyond the sharded trace: the root group gathered in bf16 all step and
    two blocks (the one computing, the one prefetched); the root's and one block's unsharded
    bf16 gradients and their fp32 reduce-scatter inputs."""
    from leviathan.model.accounting import account

    block = block_params(cfg)
    root = account(cfg, cfg.max_seq_len).total_params - cfg.n_layers * block
    return 2 * (root + 2 * block) + (2 + 4) * (root + block)


def block_params(cfg: Any) -> int:
    """Parameters of one transformer block (attention, SwiGLU, two norms)."""
    d = cfg.d_model
    return 4 * d * d + 3 * d * cfg.ffn_hidden + 2 * d


def train_memory(
    cfg: Any, micro_batch: int, gpus: int, model: str | None, parallel: str = "ddp"
) -> JobMemory:
    """A training job's peak per GPU: `micro_batch` sequences per forward, `gpus` GPUs, the
    model replicated (`ddp`) or sharded over them (`fsdp`)."""
    from leviathan.model.accounting import account

    params = account(cfg, cfg.max_seq_len).total_params
    several = gpus > 1
    sharded = several and parallel == "fsdp"
    if sharded:
        extra = fsdp_buffers(cfg)
    else:
        extra = 4 * params if several else 0
    return JobMemory(
        traced=_train_peak(cfg, micro_batch, gpus if sharded else 1),
        logsumexp=loss_chunk_bytes(cfg, micro_batch * cfg.max_seq_len),
        ddp_buckets=extra,
        fixed=CUDA_CONTEXT_BYTES + (NCCL_BYTES if several else 0),
        gpu=gpu_model(model),
    )


def largest_fitting(
    cfg: Any, per_rank: int, below: int, gpus: int, model: str, parallel: str = "ddp"
) -> int | None:
    """The largest micro-batch under `below` that divides the per-rank batch and fits."""
    for micro in range(below - 1, 0, -1):
        if per_rank % micro == 0 and train_memory(cfg, micro, gpus, model, parallel).fits:
            return micro
    return None


def fitting_micro_batch(
    cfg: Any, gpu: str | None, batches: tuple[int, int, int], parallel: str = "ddp"
) -> int | None:
    """The largest micro-batch below the one that ran out of memory that the memory model
    predicts to fit the GPU named `gpu` (torch.cuda.get_device_name), for `batches` =
    (per-rank batch, micro-batch, ranks); None for a GPU the model table does not know."""
    if gpu is None or gpu_model(gpu) is None:
        return None
    per_rank, micro_batch, ranks = batches
    return largest_fitting(cfg, per_rank, micro_batch, ranks, gpu, parallel)


def refusal(scale: str, micro: int, memory: JobMemory, largest: int | None) -> str:
    """The one line that refuses a training micro-batch that does not fit its GPU."""
    fix = (
        f"set train.{scale}.micro_batch: {largest} (the largest that fits)"
        if largest
        else "no micro-batch fits: choose a GPU with more memory (resources.<scale>.gpu_model)"
    )
    gpu = memory.gpu
    assert gpu is not None
    return (
        f"train.{scale}.micro_batch={micro} needs {memory.total / GIB:.1f} GB per GPU, an "
        f"{gpu.name} holds {gpu.memory / GIB:.0f} GB: {fix}"
    )

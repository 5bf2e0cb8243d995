"""One real training micro-batch step traced on FakeTensors at the study's shapes: the bytes
each part moves (`leviathan.cost.traffic`) and the peak of the memory its live tensors hold,
with no allocation and no GPU (seconds at the 1.2b shapes). An evaluation job's forward is
traced under the same stand-ins (`gpu_stand_in`, `LiveMemory`) by `cost/eval_memory.py`.

The step is the trainer's (`leviathan.train.trainer.Trainer.train_step`): the model's forward
with targets (the chunked loss) under bf16 autocast, backward, `clip_grad_norm_` to
`grad_clip`, an AdamW step with the trainer's hyperparameters, `zero_grad(set_to_none=True)`.
A GPU is stood in for by
  * the GPU chunk rule (`leviathan.device.forced_policy("gpu")`: one LEV chunk, the loss's
    chunks of an 80 GB device, the head padded to `HEAD_ROWS_MULTIPLE` rows);
  * CPU autocast to bf16 (the same casts as CUDA autocast: matmuls in bf16, reductions fp32);
  * the kernels a GPU runs where a CPU runs others: AdamW as the trainer builds it on CUDA
    (`OPTIMIZER_IMPL`: fused); the loss's Triton kernels (`loss.uses_fused_kernels`, where
    Triton is importable; else the chunked loss is counted, and says so in `StepTrace.loss`);
    RMSNorm as CUDA dispatches `F.rms_norm` with input and weight of one dtype (ATen's fused
    kernel, one op each way: `rms_norm_as_on_cuda`; a CPU decomposes it); LEV's spline
    product is its custom op on any device (its fake implementation here), as on a GPU;
  * the data-dependent values a FakeTensor cannot hold, stated (`_DataStandIn`): a host read
    of a scalar (the ids' range check, AdamW's step count) reads 1, and `torch.unique` of a
    micro-batch returns `distinct` ids (default `distinct_ids`, the roofline's bound).
What the CPU stand-in does not see (its kernels are not a GPU's: SDPA and RMSNorm decompose
differently, inductor's fusion is absent) is recorded where the roofline is held to it
(tests/cost/test_step_count.py).

An AdamW step on zero gradients runs first (outside the count) so that its moments exist: the
counted step is a steady-state one. Parts: `input` (the variant's input module, forward and backward),
`backbone` (blocks and final norm), `head+loss` (everything else of forward and backward: the
loss, the head's matmuls), `optimizer` (clipping and the AdamW step, an explicit part).
"""

from __future__ import annotations

import importlib.util
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from leviathan.cost.traffic import TrafficCounter
from leviathan.device import forced_policy
from leviathan.model import loss
from leviathan.model.config import ModelConfig
from leviathan.model.language_model import LanguageModel, build_model

PARTS = ("input", "backbone", "head+loss", "optimizer")
# the AdamW implementation the trainer builds on CUDA (`Trainer`: fused=True there, foreach on
# a CPU); the roofline's ADAMW_BYTES follows it
OPTIMIZER_IMPL = "fused"
aten = torch.ops.aten


@dataclass(frozen=True)
class Optimizer:
    """The trainer's AdamW hyperparameters and clipping (`TrainConfig`'s fields)."""

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0


def part_of(parents: set[str]) -> str:
    """The part of an op from the modules it runs under (ModuleTracker's names)."""
    if any(p.startswith("LanguageModel.io.input") for p in parents):
        return "input"
    if any(p.startswith("LanguageModel.backbone") for p in parents):
        return "backbone"
    return "head+loss"


def distinct_ids(cfg: ModelConfig, tokens: int) -> int:
    """Distinct ids of a micro-batch, bounded as the accounting bounds them: every position a
    distinct id, at most the vocabulary (a real batch of text has fewer)."""
    return min(tokens, cfg.vocab_size)


class _DataStandIn(TorchDispatchMode):
    """The values FakeTensors cannot hold (see the module docstring): a scalar read reads 1;
    `torch.unique` returns `distinct` ids and the inverse map of the input's shape."""

    def __init__(self, distinct: int) -> None:
        super().__init__()
        self.distinct = distinct

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (aten._local_scalar_dense.default, aten.item.default):
            return 1
        if func.overloadpacket is aten._unique2:
            ids = args[0]
            uniq = torch.empty(min(self.distinct, ids.numel()), dtype=ids.dtype, device=ids.device)
            inverse = torch.empty(ids.shape, dtype=torch.long, device=ids.device)
            return uniq, inverse, torch.empty(0, dtype=torch.long, device=ids.device)
        return func(*args, **(kwargs or {}))


class LiveMemory(TorchDispatchMode):
    """The peak of the bytes held by live tensor storages: those `hold` registers (the model,
    its gradients, the optimizer's state) and every storage an op creates, freed when its last
    tensor is (a caching allocator's rounding and fragmentation are not counted).

    `world` > 1 counts the storages marked sharded (`hold(..., sharded=True)`, `shard`: the
    parameters, their gradients once accumulated, AdamW's moments) at 1/world of their size,
    as FSDP holds them on each of `world` ranks; the gathered working set FSDP adds is the
    memory model's allowance (`leviathan.cost.memory`)."""

    def __init__(self, world: int = 1) -> None:
        super().__init__()
        self.current = 0.0
        self.peak = 0
        self.world = world
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._sharded: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def hold(self, *values: Any, sharded: bool = False) -> None:
        for t in tree_leaves(values):
            if isinstance(t, torch.Tensor):
                self._add(t, sharded)

    def shard(self, t: torch.Tensor) -> None:
        """Count `t`'s storage (already live, e.g. an accumulated gradient) as sharded."""
        storage = t.untyped_storage()
        size = self._seen.get(storage)
        if size is None or self.world == 1 or storage in self._sharded:
            return
        self._sharded[storage] = True
        rebate = size * (1 - 1 / self.world)
        self.current -= rebate
        weakref.finalize(storage, self._free, -rebate)  # freed: its sharded size only

    def _add(self, t: torch.Tensor, sharded: bool = False) -> None:
        storage = t.untyped_storage()
        if storage in self._seen:
            return
        size = storage.nbytes()
        self._seen[storage] = size
        self.current += size
        weakref.finalize(storage, self._free, size)
        if sharded:
            self.shard(t)
        self.peak = max(self.peak, int(self.current))

    def _free(self, size: float) -> None:
        self.current -= size

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._add(t)
        # sharded: autocast's compute copy of a parameter stands for FSDP's gathered one, held
        # only while its group computes (the memory model's allowance), so it counts as sharded
        if func is aten._to_copy.default and self._is_sharded(args[0]) and args[0].requires_grad:
            self.shard(out)
        return out

    def _is_sharded(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.untyped_storage() in self._sharded


@dataclass(frozen=True)
class StepTrace:
    """What one traced micro-batch step moved, per part, and the peak memory it held."""

    tokens: int
    distinct: int
    bytes: dict[str, int]  # read + written per part
    peak_bytes: int  # live storages at their peak: weights, gradients, AdamW state, activations
    counter: TrafficCounter  # per-op records, to see where a part's bytes go


def fused_loss_available() -> bool:
    """Whether the loss's Triton kernels can be traced here (Triton importable)."""
    return importlib.util.find_spec("triton") is not None


@torch.library.custom_op("leviathan_stand_in::fused_rms_norm", mutates_args=())
def _fused_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """ATen's fused RMSNorm (what CUDA runs for `F.rms_norm` with input and weight of one
    dtype) as one op: output and the inverse RMS."""
    return list(torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, eps))


@_fused_rms_norm.register_fake
def _(x: torch.Tensor, w: torch.Tensor, eps: float) -> list[torch.Tensor]:
    return [torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)]


@torch.library.custom_op("leviathan_stand_in::fused_rms_norm_backward", mutates_args=())
def _fused_rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> list[torch.Tensor]:
    dims = [x.shape[-1]]
    return list(torch.ops.aten._fused_rms_norm_backward(dy, x, dims, rstd, w, [True, True]))


@_fused_rms_norm_backward.register_fake
def _(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor) -> list[torch.Tensor]:
    return [torch.empty_like(x), torch.empty_like(w)]


def _save_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])


def _norm_backward(ctx: Any, grads: list[torch.Tensor]) -> tuple[Any, ...]:
    x, w, rstd = ctx.saved_tensors
    return (*_fused_rms_norm_backward(grads[0], x, w, rstd), None)


torch.library.register_autograd(
    "leviathan_stand_in::fused_rms_norm", _norm_backward, setup_context=_save_norm
)
_RMS_NORM = F.rms_norm


def rms_norm_as_on_cuda(
    x: torch.Tensor, shape: list[int], weight: torch.Tensor | None = None, eps: float | None = None
) -> torch.Tensor:
    """F.rms_norm as CUDA dispatches it: ATen's fused kernels where input and weight share a
    dtype (one op to the counter each way), else the composite (torch warns so)."""
    if weight is None or weight.dtype != x.dtype or eps is None:
        return _RMS_NORM(x, shape, weight, eps)
    return _fused_rms_norm(x, weight, eps)[0]


@contextmanager
def gpu_stand_in(distinct: int) -> Iterator[None]:
    """FakeTensors under the GPU chunk rule, with the stated stand-ins (module docstring)."""
    with ExitStack() as stack:
        stack.enter_context(forced_policy("gpu"))
        stack.enter_context(mock.patch.object(F, "rms_norm", rms_norm_as_on_cuda))
        if fused_loss_available():
            stack.enter_context(mock.patch.object(loss, "uses_fused_kernels", lambda device: True))
        stack.enter_context(FakeTensorMode())
        stack.enter_context(_DataStandIn(distinct))
        yield


def random_batch(cfg: ModelConfig, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (rows, cfg.max_seq_len)
    return torch.randint(0, cfg.vocab_size, shape), torch.randint(0, cfg.vocab_size, shape)


def _step(
    model: LanguageModel, opt: torch.optim.Optimizer, batch: Any, clip: float, count: Any
) -> None:
    """The trainer's step on one micro-batch; `count`: the counter's part() (or None)."""
    ids, targets = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids, targets)
    loss.backward()
    with count("optimizer") if count else ExitStack():
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)


def _first_step(model: LanguageModel, opt: torch.optim.Optimizer) -> None:
    """An AdamW step on zero gradients: its moments now exist, as in every later step."""
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)


def trace_step(
    cfg: ModelConfig,
    micro_batch: int,
    optim: Optimizer | None = None,
    distinct: int | None = None,
    count: bool = True,
    world: int = 1,
) -> StepTrace:
    """One steady-state training micro-batch step of `micro_batch` sequences of
    cfg.max_seq_len tokens: its peak memory and (`count`) its bytes per part. `world` > 1:
    the peak with parameters, gradients and AdamW's state sharded over `world` ranks (FSDP;
    `LiveMemory`)."""
    optim = optim or Optimizer()
    tokens = micro_batch * cfg.max_seq_len
    distinct = distinct_ids(cfg, tokens) if distinct is None else distinct
    with gpu_stand_in(distinct):
        model = build_model(cfg)
        opt = torch.optim.AdamW(
            model.parameters(),
            lr=optim.lr,
            betas=optim.betas,
            eps=optim.eps,
            weight_decay=optim.weight_decay,
            **{OPTIMIZER_IMPL: True},
        )
        batch = random_batch(cfg, micro_batch)
        _first_step(model, opt)
        memory = LiveMemory(world)
        memory.hold(list(model.parameters()), opt.state, sharded=True)
        memory.hold(list(model.buffers()), batch)
        for p in model.parameters():  # a gradient, once accumulated, is reduce-scattered
            p.register_post_accumulate_grad_hook(lambda p: memory.shard(p.grad))
        counter = TrafficCounter(part_of)
        with memory, counter if count else ExitStack():
            _step(model, opt, batch, optim.grad_clip, counter.part if count else None)
    return StepTrace(tokens, distinct, counter.by_part(), memory.peak, counter)

"""The GPU check's shapes and training steps (`bench/gpu_check.py`): the study's micro-batches,
seeded batches of Zipf-distributed ids, models built as the cells build them, and the step as
the trainer runs it; timed with the device synchronised."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from pathlib import Path
from typing import Any

import gpu_check_predict as predict
import torch
import yaml

from leviathan.device import device_name
from leviathan.model import LanguageModel, build_model, model_config
from leviathan.model.config import ModelConfig
from leviathan.train.config import TrainConfig, train_config
from leviathan.train.optimizer import build_optimizer, clip_gradients
from leviathan.train.regions import compile_regions

# the study whose micro-batches are measured (`train.<scale>.micro_batch`: what the plan and
# its memory and roofline predictions use), read with PyYAML (the plan's config loader needs
# Snakemake, absent from a GPU image)
STUDY = Path(__file__).resolve().parents[1] / "config" / "paper.yaml"
N_BATCHES = 4  # distinct batches, cycled: the distinct-id count changes from step to step
ZIPF_S = 1.0  # token ids drawn with P(rank r) ~ 1 / r^s, as natural text's frequencies fall
SMOKE_MICRO_BATCH = 2  # --smoke's micro-batch (its figures mean nothing; its time does)


class Setup:
    """The check's shapes and device; `gpu`: the GPU predicted for (default: the device's,
    `gpu_check_predict.predicted_gpu`)."""

    def __init__(self, smoke: bool, gpu: str | None = None) -> None:
        self.smoke = smoke
        self.device = torch.device("cpu" if smoke else "cuda")
        self.vocab = "gpt2" if smoke else "o200k_base"
        self.scale, self.big = ("micro", "micro") if smoke else ("400m", "1.2b")
        # the study's micro-batches; --smoke: SMOKE_MICRO_BATCH sequences of micro
        self.micro_batch = {"micro": SMOKE_MICRO_BATCH, **study_micro_batches()}
        self.steps = 2 if smoke else 10
        self.gpu = gpu or predict.predicted_gpu(device_name(self.device))

    def cfg(self, scale: str, variant: str = "leviathan") -> ModelConfig:
        return model_config(scale, self.vocab, variant)

    def recipe(self, scale: str, variant: str) -> TrainConfig:
        """The cell's training recipe: its optimizer's hyperparameters and clipping."""
        return train_config(scale, self.vocab, variant, micro_batch=self.micro_batch[scale])

    def autocast(self, bf16: bool) -> AbstractContextManager[Any]:
        """bf16 autocast on this device (--smoke: CPU autocast, so its branches run in tests)."""
        if bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def study_micro_batches(path: Path = STUDY) -> dict[str, int]:
    """The study's micro-batch per scale (`train.<scale>.micro_batch` of its config)."""
    train = yaml.safe_load(path.read_text())["train"]
    return {scale: int(fields["micro_batch"]) for scale, fields in train.items()}


def new_model(setup: Setup, scale: str, variant: str) -> LanguageModel:
    torch.manual_seed(0)
    return build_model(setup.cfg(scale, variant), setup.device)


@cache
def cpu_batches(vocab_size: int, context: int, batch: int) -> list[torch.Tensor]:
    """N_BATCHES batches of `batch` windows of context + 1 ids, each id drawn with a Zipf-like
    frequency (ranks shuffled over the vocabulary, fixed seed): their distinct-id counts differ
    from batch to batch as training's do, so a recompile on LEV's dynamic shapes would show in
    the timed steps. On the CPU, once: the prediction counts their distinct ids."""
    gen = torch.Generator().manual_seed(0)
    weights = torch.arange(1, vocab_size + 1, dtype=torch.float64).pow(-ZIPF_S)
    ids_of_rank = torch.randperm(vocab_size, generator=gen)
    draws = (
        torch.multinomial(weights, batch * (context + 1), True, generator=gen)
        for _ in range(N_BATCHES)
    )
    return [ids_of_rank[d].view(batch, context + 1) for d in draws]


def device_batches(setup: Setup, cfg: ModelConfig, batch: int) -> list[torch.Tensor]:
    return [b.to(setup.device) for b in cpu_batches(cfg.vocab_size, cfg.max_seq_len, batch)]


def first_batch(setup: Setup, cfg: ModelConfig, batch: int) -> torch.Tensor:
    return device_batches(setup, cfg, batch)[0]


def distinct_ids(setup: Setup, scale: str) -> list[int]:
    """Distinct input ids of each batch of `scale`'s micro-batch (what LEV generates per step)."""
    cfg = setup.cfg(scale)
    batches = cpu_batches(cfg.vocab_size, cfg.max_seq_len, setup.micro_batch[scale])
    return [len(torch.unique(b[:, :-1])) for b in batches]


def step_fn(
    setup: Setup,
    model: torch.nn.Module,
    batches: list[torch.Tensor],
    recipe: TrainConfig,
    opt: torch.optim.Optimizer | None = None,
) -> Callable[[], None]:
    """One optimizer step per call, on the next of `batches` (cycled), as the trainer steps:
    bf16 autocast, the gradients clipped (their norm read, as the trainer's non-finite check
    reads it), then its AdamW (`leviathan.train.optimizer`: fused on CUDA)."""
    opt = opt or build_optimizer(model.parameters(), recipe, setup.device)
    cycle = itertools.cycle(batches)

    def step() -> None:
        ids = next(cycle)
        with setup.autocast(True):
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        float(clip_gradients(model.parameters(), recipe.grad_clip))
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed(setup: Setup, fn: Callable[[], object], steps: int) -> float:
    fn()  # warm-up (compilation)
    setup.sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        setup.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def launches(setup: Setup, fn: Callable[[], object]) -> int | str:
    """Kernels one call of `fn` launches (torch.profiler: CUDA kernel records); on CPU the
    aten ops it runs (nested ones included), what a CPU can count."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = setup.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            fn()
            setup.sync()
    except Exception as e:  # a profiler that cannot start costs this field only
        return f"not counted: {type(e).__name__}: {e}"
    if cuda:
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    return sum(1 for e in prof.events() if e.name.startswith("aten::"))


def compiled(model: LanguageModel, compile: bool) -> LanguageModel:
    """The model as training steps it: its blocks compiled in place where `compile`."""
    if compile:
        compile_regions(model)
    return model

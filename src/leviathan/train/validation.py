"""Validation loss: the mean loss over fixed validation windows, every target counted once.

`Validator` is the training run's side: it decides its own interval (`should_validate`) and
evaluates the model it was given on the run's validation shard.

A validation curve is one sample: each `val` record of the metrics log names it (`val_sample`:
the first `validation.windows` fixed windows of the shard, 0: all), and a resume that asks for
another sample is refused (`check_val_sample`), because every reader of the log (the report's
along-training figures, `dvc plots`, W&B) draws its `val` records as one curve and could not
tell the two samples apart. The batch size is no part of the sample: it only groups windows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from leviathan.data.loader import val_batches
from leviathan.model import LanguageModel
from leviathan.train.config import ValidationConfig
from leviathan.train.distributed import DistInfo, all_reduce_sum


def evaluate_val_loss(
    model: LanguageModel,
    val_bin: Path,
    *,
    context: int,
    batch: int,
    windows: int,
    info: DistInfo,
    vocab: str,
    autocast: Any,
) -> float:
    """Mean loss over the first `windows` fixed validation windows (0: all), every target once."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=info.device)
    batches = val_batches(
        val_bin,
        context=context,
        batch_size=batch,
        rank=info.rank,
        world_size=info.world_size,
        max_windows=windows or None,
        vocab=vocab,
    )
    # eager, as before any compile: the training step's compiled blocks (`train.regions`)
    # would otherwise compile again for this no-grad pass and its batch shape
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        for x, y in _even(batches, model, info, context):
            x, y = x.to(info.device), y.to(info.device)
            with autocast:
                losses = model.token_losses(x, y)
            sums[0] += losses.double().sum()
            sums[1] += (y != -100).sum()
    all_reduce_sum(sums, info)
    model.train(was_training)
    return float(sums[0] / sums[1].clamp_min(1))


def _even(
    batches: Any, model: Any, info: DistInfo, context: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The rank's batches; where the model is sharded (FSDP: every forward is a collective), as
    many on every rank: a rank with fewer windows runs forwards on a batch of ignored targets
    (-100: no loss, no count) until all have run as many as the busiest."""
    from leviathan.train.fsdp import is_sharded

    if not (info.enabled and is_sharded(model)):
        yield from batches
        return
    mine = list(batches)
    most = torch.tensor([len(mine)], device=info.device)
    torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
    yield from mine
    for _ in range(int(most.item()) - len(mine)):
        ids = torch.zeros((1, context), dtype=torch.long)
        yield ids, torch.full_like(ids, -100)


class Validator:
    """The validation loss of one run's model (None without a validation shard), every
    `config.every` steps (0: only when asked) and whenever `validate` is called, over
    `config.windows` windows in batches of `config.batch`. A collective under DDP: every rank
    validates at the same steps."""

    def __init__(
        self,
        model: LanguageModel,
        val_bin: Path | None,
        config: ValidationConfig,
        *,
        context: int,
        info: DistInfo,
        vocab: str,
        autocast: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.model, self.val_bin, self.config = model, val_bin, config
        self.context, self.info, self.vocab, self.autocast = context, info, vocab, autocast
        self.sample = val_sample(config)  # what each of its losses is a mean over

    def should_validate(self, step: int) -> bool:
        """Whether to validate after optimizer step `step`: the run has a validation shard and
        the interval falls there."""
        every = self.config.every
        return self.val_bin is not None and bool(every) and step % every == 0

    def validate(self) -> float | None:
        """The model's validation loss now; None where the run has no validation shard."""
        if self.val_bin is None:
            return None
        return evaluate_val_loss(
            self.model,
            self.val_bin,
            context=self.context,
            batch=self.config.batch,
            windows=self.config.windows,
            info=self.info,
            vocab=self.vocab,
            autocast=self.autocast(),
        )


def val_sample(config: ValidationConfig) -> dict[str, int]:
    """What a validation loss is a mean over: the first `windows` fixed windows of the run's
    validation shard (0: all of them)."""
    return {"windows": config.windows}


def check_val_sample(metrics: Path, step: int, sample: dict[str, int]) -> None:
    """Refuse (ValueError, one line) to resume at `step` a run whose `val` records up to there
    name another sample than `sample`; records without one (older runs) and lines that are no
    whole record (a torn tail, set aside elsewhere) are passed over."""
    recorded = None
    if metrics.is_file():
        for line in metrics.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") == "val" and "sample" in rec:
                if isinstance(rec.get("step"), int) and rec["step"] <= step:
                    recorded = rec["sample"]
    if recorded is not None and recorded != sample:
        before = ", ".join(f"validation.{k}={v}" for k, v in recorded.items())
        now = ", ".join(f"validation.{k}={v}" for k, v in sample.items())
        raise ValueError(
            f"{metrics}: the run's validation curve is over {before} and this resume asks for "
            f"{now}: one curve is one sample; resume with runtime.{before} (or train the other "
            "sample in a new run directory)"
        )

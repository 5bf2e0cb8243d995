"""Train one cell: token shards in, checkpoints and a metrics log out.

`train(cfg, train_bins=..., val_bin=..., run_dir=...)` runs the paper's recipe on CPU, one
GPU or a torchrun DDP job through the same code, one process per run directory (a lock).
Restarting the same call resumes from the newest intact checkpoint (every file checked
against its manifest first; bitwise on CPU); SIGTERM/SIGUSR1/SIGINT checkpoint and raise
`Preempted`, in the final phase too; a non-finite loss raises `NonFiniteLoss` naming the step
and the last good checkpoint, writing nothing; the device running out of memory raises
`OutOfMemory`, one line naming train.<scale>.micro_batch and a smaller value (micro_batch is
no part of the run's identity: the rerun with it resumes). Before the first step each fused
kernel the steps launch is checked on the device (`leviathan.model.kernel_check`): one that
fails is not used (a WARNING), or under runtime.kernel_check: error raises
`KernelCheckFailed`; the checkpoints' manifests record the outcome (env.kernel_check).

`Trainer` wires the components, `Trainer.train_step` is one optimizer step of the recipe and
`Trainer.fit` the loop; each component decides its own interval. Beside it:
  checkpoint.py   CheckpointManager: saves/restores model, optimizer, loader, train state, RNG
  fsdp.py         FSDP2, runtime.parallel=fsdp: each block, LEV and the root sharded over the ranks
  dcp_checkpoint.py  an FSDP run's checkpoints: the optimizer sharded, every rank writes its own
  preemption.py   PreemptionWatch, Preempted: SIGTERM/SIGUSR1/SIGINT -> checkpoint, 128+signal
  finished.py     a rerun of a finished run: its final's state.json put back, nothing trained
  telemetry.py    TrainTelemetry: metrics records, progress bar; rewind_metrics on a restart
  validation.py   Validator, evaluate_val_loss
  errors.py       NonFiniteLoss, ConfigMismatch, NoIntactCheckpoint and their texts

Run directory:
  .lock                                       held by the process training it (leviathan.lock)
  checkpoints/                                step_<N>/, final/, kept/step_<N>/ (leviathan.checkpoint)
  metrics.jsonl                               kind = start | train | val | end (a torn line set
                                              aside as metrics.torn-<n>.jsonl at a restart, of a
                                              finished run too); a train record holds its batch's
                                              fingerprint, batch_sha256 (leviathan.data.batch_view)
  metrics.jsonl.json                          its manifest, once the run finished (log_anchor.py)
  out_of_memory.json                          the last out-of-memory refusal (removed at a start)
  exit.json                                   how the last attempt ended (exit_record.py)
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from leviathan import layout
from leviathan.checkpoint.files import checkpoints_dir
from leviathan.checkpoint.rng import seed_rngs
from leviathan.checkpoint.store import ManifestInfo
from leviathan.data.loader import Prefetcher, TrainLoader
from leviathan.data.roles import check_training_shards
from leviathan.data.shards import verify_shards
from leviathan.device import set_deterministic
from leviathan.io import write_json
from leviathan.lock import hold_lock
from leviathan.manifest import invalidate_manifest
from leviathan.model import LanguageModel, build_model
from leviathan.model.accounting import account_model
from leviathan.model.kernel_check import self_check
from leviathan.provenance import utc_now
from leviathan.train.batch_fingerprint import step_batch_sha256
from leviathan.train.checkpoint import CheckpointManager, run_inputs
from leviathan.train.config import RuntimeConfig, TrainConfig
from leviathan.train.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    init_distributed,
    shutdown,
    wrap_model,
)
from leviathan.train.errors import (
    OutOfMemory,
    check_grad_norm,
    check_loss,
    out_of_memory,
)
from leviathan.train.exit_record import record_exit
from leviathan.train.finished import log_finished
from leviathan.train.log_anchor import anchor_log
from leviathan.train.metrics_log import MetricsLog, rewind_metrics, set_aside_torn
from leviathan.train.optimizer import build_optimizer, clip_gradients
from leviathan.train.preemption import PreemptionWatch
from leviathan.train.schedule import lr_at
from leviathan.train.telemetry import StepRecord, TrainTelemetry, lev_health_stats, log_due
from leviathan.train.validation import Validator, check_val_sample
from leviathan.vocab import check_covers

__all__ = ["TrainResult", "Trainer", "build_cell_model", "train"]


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    final_checkpoint: Path
    steps: int
    start_step: int
    final_train_loss: float | None
    final_val_loss: float | None


def build_cell_model(cfg: TrainConfig) -> LanguageModel:
    mcfg = cfg.model_config()
    seed_rngs(cfg.seed)
    return build_model(mcfg)


def _micro_batches(
    x: torch.Tensor, y: torch.Tensor, size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(0, x.shape[0], size):
        yield x[i : i + size], y[i : i + size]


def train(
    cfg: TrainConfig,
    *,
    train_bins: Sequence[Path | str],
    val_bin: Path | str | None,
    run_dir: Path | str,
    runtime: RuntimeConfig = RuntimeConfig(),
) -> TrainResult:
    """Train (or resume) the run in `run_dir`: one process per run directory (the launch's
    main process holds its lock, `leviathan.lock`; a second one is refused in one line)."""
    cfg.validate(int(os.environ.get("WORLD_SIZE", "1")))  # torchrun's ranks: before any work
    check_training_shards(train_bins, val_bin)  # none twice, the validation shard held out
    run_dir = Path(run_dir)
    launch_main = int(os.environ.get("RANK", "0")) == 0
    with (
        hold_lock(run_dir, "run directory", folder=True)
        if launch_main
        else contextlib.nullcontext(),
        record_exit(run_dir) if launch_main else contextlib.nullcontext(),  # exit.json
    ):
        if runtime.verify_shards == "full" and launch_main:
            # before the process group exists: no collective waits on this pass over the data
            shards = [Path(p) for p in [*train_bins, *([val_bin] if val_bin else [])]]
            verify_shards(shards, progress=runtime.progress)
        info = init_distributed(runtime.device, runtime.dist_timeout_s)
        try:
            trainer = Trainer(
                cfg,
                [Path(p) for p in train_bins],
                Path(val_bin) if val_bin else None,
                run_dir,
                runtime,
                info,
            )
            return trainer.fit()
        finally:
            shutdown(info)


class Trainer:
    """One training run, wired: the model (`model`, as saved and validated; `train_model`, as
    stepped: compiled and/or wrapped by DDP), the data loader, the optimizer and the checkpoint
    manager, which restores them all when the run restarts, and the validator. `train_step` is
    one optimizer step, `fit` the training loop."""

    def __init__(
        self,
        cfg: TrainConfig,
        train_bins: list[Path],
        val_bin: Path | None,
        run_dir: Path,
        runtime: RuntimeConfig,
        info: DistInfo,
    ) -> None:
        self.started = utc_now()
        if runtime.threads:
            torch.set_num_threads(runtime.threads)
        if runtime.deterministic:
            set_deterministic()
        self.cfg, self.runtime, self.info = cfg, runtime, info
        self.val_bin, self.run_dir = val_bin, run_dir
        device = info.device
        self.model = build_cell_model(cfg).to(device)
        self.sharded = runtime.parallel == "fsdp" and info.enabled  # FSDP2: train/fsdp.py
        if self.sharded:
            from leviathan.train.fsdp import compute_dtype, shard_model

            shard_model(
                self.model,
                info,
                compile=runtime.compile,
                activation_checkpointing=runtime.activation_checkpointing,
                param_dtype=compute_dtype(device, runtime.bf16),
            )
        self.loader = self._loader(train_bins)
        barrier(info)
        # the loader refuses shards of another vocabulary; the model must cover this one
        check_covers(
            self.model.cfg.vocab_size, cfg.vocab, fix="leave train.vocab_size unset or raise it"
        )
        self.optimizer = build_optimizer(self.model.parameters(), cfg, device)
        self.checkpoints = self._checkpoint_manager()
        self.restored = self.checkpoints.restore(runtime.restart_on_mismatch)
        if not self.restored.finished:  # the kernels the steps may launch, checked here first
            self_check(self.model, device, bf16=runtime.bf16, mode=runtime.kernel_check)
        self.accounting = account_model(self.model, cfg.context)
        stepping = not self.restored.finished  # a finished run is not compiled nor wrapped
        self.ddp, self.train_model = wrap_model(
            self.model,
            info,
            runtime.compile,
            stepping and not self.sharded,
            checkpointing=runtime.activation_checkpointing,
        )
        self.bf16 = runtime.bf16 and device.type == "cuda"
        self.n_micro = self.loader.local_batch // cfg.micro_batch
        self.validator = Validator(
            self.model,
            val_bin,
            runtime.validation,
            context=cfg.context,
            info=info,
            vocab=cfg.vocab,
            autocast=self._autocast,
        )

    def _loader(self, train_bins: list[Path]) -> TrainLoader:
        """This rank's data loader. Every rank checks size and sampled fingerprint against the
        manifests (milliseconds); the full hash is runtime.verify_shards=full, done in `train`
        before the process group exists."""
        cfg, info = self.cfg, self.info
        return TrainLoader(
            train_bins,
            context=cfg.context,
            global_batch=cfg.global_batch,
            seed=cfg.seed,
            rank=info.rank,
            world_size=info.world_size,
            vocab=cfg.vocab,
            verify_sha256=False,
            progress=self.runtime.progress,
        )

    def _checkpoint_manager(self) -> CheckpointManager:
        """The run's checkpoints: what they hold, where, how often and how many are kept."""
        manager = CheckpointManager
        if self.sharded:  # every rank writes its shard (train/dcp_checkpoint.py)
            from leviathan.train.dcp_checkpoint import ShardedCheckpointManager as manager
        return manager(
            checkpoints_dir(self.run_dir),
            model=self.model,
            optimizer=self.optimizer,
            loader=self.loader,
            cfg=self.cfg,
            info=self.info,
            config=self.runtime.checkpoint,
        )

    def fit(self) -> TrainResult:
        """The training loop: an optimizer step, then logging, validation and checkpointing
        where their intervals fall (the components decide); a signal checkpoints and stops.
        At the end a last validation and the final checkpoint."""
        start, stop = self.restored.step, self.cfg.max_steps
        if self.restored.finished:
            return self._finished()
        record: StepRecord | None = None
        with (
            self._begin() as telemetry,
            self._batches(start) as batches,
            contextlib.closing(self.checkpoints),
        ):
            self.train_model.train()
            if start == 0:
                self.checkpoints.keep_if_due(0)  # the initial weights
            with PreemptionWatch(self.info) as preemption:
                for step in range(start, stop):
                    record = self.train_step(step, batches)
                    telemetry.record_step(record)
                    self.checkpoints.keep_if_due(record.step)
                    if record.step == stop:
                        break  # the final validation and checkpoint follow
                    if self.validator.should_validate(record.step):
                        self._validate(record.step, telemetry)
                    if preemption.requested():  # every rank stops at the same step
                        saved = self.checkpoints.save_step(record.step, record.loss, wait=True)
                        raise preemption.stop(saved)
                    self.checkpoints.save_if_due(record.step, record.loss)
                # a signal from here on is answered once `final` is written: the run is whole
                loss = record.loss if record else None
                val_loss = self._validate(stop, telemetry)
                final = self.checkpoints.save_final(stop, loss, val_loss)
                telemetry.end(stop, train_loss=loss, val_loss=val_loss)
                if preemption.requested():
                    raise preemption.stop(final)
        self._anchor_log()
        return TrainResult(self.run_dir, final, stop, start, loss, val_loss)

    def train_step(self, step: int, batches: Prefetcher) -> StepRecord:
        """Optimizer step `step` (0-based) of the recipe: the scheduled learning rate, the
        step's batch, forward and backward over its micro-batches, refusal of a non-finite loss
        or gradient norm (nothing applied), clipping, the AdamW update. The device running out
        of memory is refused in one line (`OutOfMemory`), recorded in the run directory."""
        try:
            return self._step(step, batches)
        except torch.OutOfMemoryError:
            pass  # outside the handler: the failed step's tensors are freed with its frames
        raise self._out_of_memory(step + 1)

    def _out_of_memory(self, step: int) -> OutOfMemory:
        """The refusal of an out-of-memory error in step `step`, written to the run's record
        (by the rank that ran out: on several ranks, whichever did)."""
        exc = out_of_memory(
            self.cfg.scale,
            self.cfg.micro_batch,
            self.loader.local_batch,
            step=step,
            device=str(self.info.device),
            last_good=self.checkpoints.last_good,
            model_cfg=self.model.cfg,
            ranks=self.info.world_size,
            parallel="fsdp" if self.sharded else "ddp",
        )
        write_json(layout.out_of_memory_file(self.run_dir), exc.record)
        return exc

    def _step(self, step: int, batches: Prefetcher) -> StepRecord:
        """The body of `train_step`."""
        t0 = time.perf_counter()
        lr = self._set_lr(step)
        x, y = batches.get(step)  # the loader's position moves past `step`
        fingerprint = (
            step_batch_sha256(x, y, self.info)
            if log_due(step + 1, self.runtime.log_every, self.cfg.max_steps)
            else None
        )
        loss = self._forward_backward(x, y)
        last_good = self.checkpoints.last_good
        r = self.restored
        resumed = str(r.path) if r.path is not None and step == r.step else None
        check_loss(loss, step=step, lr=lr, last_good=last_good, resumed_from=resumed)
        grad_norm = self._clip_gradients()
        check_grad_norm(
            grad_norm, step=step, loss=loss, lr=lr, last_good=last_good, resumed_from=resumed
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepRecord(step + 1, loss, lr, grad_norm, self._step_time(t0), fingerprint)

    def _batches(self, start: int) -> Prefetcher:
        """The training batches from step `start` on, read ahead (pinned on CUDA)."""
        device = self.info.device
        return self.loader.prefetch(
            start,
            self.cfg.max_steps,
            depth=self.runtime.prefetch,
            pin_for=device if device.type == "cuda" else None,
        )

    def _finished(self) -> TrainResult:
        """A run whose final checkpoint verified: nothing is trained (one INFO line, finished.py);
        its metrics log keeps every whole record, a torn line is set aside (main rank)."""
        r = self.restored
        assert r.path is not None and r.state is not None
        if self.info.is_main:
            log_finished(r.path, r.step)
            set_aside_torn(layout.metrics_file(self.run_dir))
        self._anchor_log()  # a run stopped before writing it; an edited log is refused
        return TrainResult(
            self.run_dir, r.path, r.step, r.step, r.state.get("train_loss"), r.state.get("val_loss")
        )

    def _anchor_log(self) -> None:
        """The metrics log's manifest, once the final checkpoint is written and the log closed
        (main rank; log_anchor.py): refused where the log is not as training wrote it."""
        if self.info.is_main:
            anchor_log(
                self.run_dir,
                config=self.cfg.to_dict(),
                started=self.started,
                device=str(self.info.device),
            )

    def _begin(self) -> TrainTelemetry:
        """Rewind the metrics log to the restored step and open it with the start record, record
        the data the checkpoints come from, show the progress bar (main rank)."""
        r, info, runtime = self.restored, self.info, self.runtime
        metrics = layout.metrics_file(self.run_dir)
        check_val_sample(metrics, r.step, self.validator.sample)  # one curve, one sample
        if info.is_main:  # the metrics of exactly the run the checkpoints belong to
            invalidate_manifest(metrics)  # it grows again: anchored anew once the run finishes
            rewind_metrics(metrics, r.step, r.aside_for(metrics))
            # an earlier out-of-memory refusal is history once a run starts stepping again
            layout.out_of_memory_file(self.run_dir).unlink(missing_ok=True)
        log = (
            MetricsLog(
                metrics,
                layout.tensorboard_dir(self.run_dir) if runtime.tensorboard else None,
                layout.dvclive_dir(self.run_dir) if runtime.dvclive else None,
                self._wandb() if runtime.wandb.enabled else None,
            )
            if info.is_main
            else None
        )
        telemetry = TrainTelemetry(
            log,
            cfg=self.cfg,
            runtime=runtime,
            info=info,
            flops_per_token=self.accounting.train_flops,
        )
        telemetry.start(
            r.step,
            params=self.accounting.total_params,
            resumed_from=r.path,
            set_aside=r.set_aside,
            because=r.because,
            damaged=r.damaged,
        )
        # the data the checkpoints come from, with the sha256 their manifests record
        if info.is_main:
            self.checkpoints.manifest = self._manifest()
        if r.step == 0:  # at initialisation
            self._lev_health(0, telemetry)
        telemetry.show_progress(r.step)
        return telemetry

    def _wandb(self) -> Any:
        """The run's W&B run (train/wandb_log.py): created, or the stored one resumed."""
        from leviathan.train.wandb_log import open_run

        shards = [s.input_record("train_tokens") for s in self.loader.shards]
        return open_run(self.run_dir, self.cfg, self.model.cfg, self.runtime, self.info, shards)

    def _manifest(self) -> ManifestInfo:
        """What the checkpoints' manifests record of the run: the data, start and device."""
        shards = [s.input_record("train_tokens") for s in self.loader.shards]
        inputs = run_inputs(shards, self.val_bin)
        device, resumed_from = str(self.info.device), self.restored.resumed_from()
        return ManifestInfo(inputs, self.started, device, resumed_from)

    def _set_lr(self, step: int) -> float:
        cfg = self.cfg
        lr = lr_at(
            step, peak=cfg.lr, warmup=cfg.warmup, total=cfg.max_steps, min_ratio=cfg.min_lr_ratio
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Accumulate the gradients of one optimizer step's batch over its micro-batches (DDP
        all-reduces them on the last); return the step's mean loss over micro-batches and ranks."""
        device, n_micro = self.info.device, self.n_micro
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        total = torch.zeros((), dtype=torch.float64, device=device)
        for i, (xm, ym) in enumerate(_micro_batches(x, y, self.cfg.micro_batch)):
            sync = self.ddp is None or i == n_micro - 1
            with contextlib.nullcontext() if sync else self.ddp.no_sync(), self._autocast():  # type: ignore[union-attr]
                loss = self.train_model(xm, ym)  # through DDP's forward
            (loss / n_micro).backward()
            total += loss.detach().double() / n_micro
        all_reduce_sum(total, self.info)
        # Host syncs, once per optimizer step (none per micro-batch): the loss and the gradient
        # norm are read for the non-finite checks and the metrics log, and the preemption flag
        # so that every rank stops at the same step.
        return float(total) / self.info.world_size

    def _clip_gradients(self) -> float:
        """Clip to `grad_clip` (0: no clipping); the norm before clipping, the same on every rank
        (all-reduced gradients)."""
        norm = clip_gradients(self.model.parameters(), self.cfg.grad_clip)
        return float(norm.full_tensor() if self.sharded else norm)  # type: ignore[attr-defined]

    def _step_time(self, t0: float) -> float:
        """Seconds since `t0`, once the device has finished the step's work."""
        if self.info.device.type == "cuda":
            torch.cuda.synchronize(self.info.device)
        return time.perf_counter() - t0

    def _autocast(self) -> Any:
        if self.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _validate(self, step: int, telemetry: TrainTelemetry) -> float | None:
        """The validation loss after step `step`, recorded; None without a validation shard."""
        val = self.validator.validate()
        if val is not None:
            telemetry.val(step, val)
            self._lev_health(step, telemetry)
        return val

    def _lev_health(self, step: int, telemetry: TrainTelemetry) -> None:
        """LEV's health statistics on the main rank (telemetry.lev_health_stats)."""
        stats = lev_health_stats(self.model, self.info.is_main, self.sharded)
        if stats is not None:
            telemetry.lev_health(step, stats)

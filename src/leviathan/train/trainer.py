"""Train one cell: token shards in, checkpoints and a metrics log out.

`train(cfg, train_bins=..., val_bin=..., run_dir=...)` runs the paper's recipe on CPU, one
GPU or a torchrun DDP job through the same code. Restarting the same call resumes from the
newest complete checkpoint (bitwise on CPU); SIGTERM/SIGUSR1 checkpoint and raise
`Preempted`; a non-finite loss raises `NonFiniteLoss` naming the step and the last good
checkpoint, writing nothing.

Run directory:
  checkpoints/step_<N>/, checkpoints/final/   (see `checkpoint.py`)
  metrics.jsonl                               kind = start | train | val | end
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from leviathan import layout
from leviathan.data.loader import DataMismatchError, TrainLoader, val_batches
from leviathan.manifest import input_record, recorded_sha256
from leviathan.model import LanguageModel, ModelConfig, build_model, model_config
from leviathan.model.accounting import account_model
from leviathan.provenance import code_version, environment, utc_now
from leviathan.train import checkpoint as ckpt
from leviathan.train.config import RuntimeConfig, TrainConfig
from leviathan.train.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    init_distributed,
    shutdown,
)
from leviathan.train.schedule import lr_at
from leviathan.train.telemetry import MetricsLog, device_name, mfu, peak_flops, rewind_metrics
from leviathan.vocab import get_vocab


class Preempted(Exception):
    """A SIGTERM/SIGUSR1 arrived; a checkpoint was written. Exit non-zero to be retried."""

    def __init__(self, signum: int, checkpoint: Path) -> None:
        super().__init__(
            f"stopped by signal {signal.Signals(signum).name}; resume from {checkpoint}"
        )
        self.signum, self.checkpoint = signum, checkpoint

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class NonFiniteLoss(RuntimeError):
    pass


class ConfigMismatch(ValueError):
    pass


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    final_checkpoint: Path
    steps: int
    start_step: int
    final_train_loss: float | None
    final_val_loss: float | None


class _SignalFlag:
    """Records SIGTERM/SIGUSR1 instead of dying; the loop checkpoints at the next step end."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self) -> None:
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _SignalFlag:
        for sig in self.SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def set_deterministic() -> None:
    """Deterministic kernels everywhere (LEV's backward then sums rows by a sort-based
    segment reduction instead of index_add_'s atomics); cuBLAS needs a fixed workspace,
    set before its first use."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def cell_model_config(cfg: TrainConfig) -> ModelConfig:
    """The model a training config trains (its scale preset, the context, its overrides)."""
    overrides = {"max_seq_len": cfg.context, **cfg.model_overrides}
    return model_config(
        cfg.scale, cfg.vocab, cfg.variant, vocab_size=cfg.vocab_size, overrides=overrides
    )


def build_cell_model(cfg: TrainConfig) -> LanguageModel:
    mcfg = cell_model_config(cfg)
    torch.manual_seed(cfg.seed)
    return build_model(mcfg)


def _check_model_vocab(cfg: TrainConfig, model: LanguageModel) -> None:
    """The loader refuses shards of another vocabulary; here: the model must cover it."""
    spec = get_vocab(cfg.vocab)
    if model.cfg.vocab_size < spec.n_vocab:
        raise ValueError(
            f"model vocab_size={model.cfg.vocab_size} < {spec.name}'s n_vocab={spec.n_vocab}: "
            "leave train.vocab_size unset or raise it"
        )


def _micro_batches(
    x: torch.Tensor, y: torch.Tensor, size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(0, x.shape[0], size):
        yield x[i : i + size], y[i : i + size]


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
    with torch.no_grad():
        for x, y in batches:
            x, y = x.to(info.device), y.to(info.device)
            with autocast:
                losses = model.token_losses(x, y)
            sums[0] += losses.double().sum()
            sums[1] += (y != -100).sum()
    all_reduce_sum(sums, info)
    model.train(was_training)
    return float(sums[0] / sums[1].clamp_min(1))


def _free_name(path: Path, tag: str) -> Path:
    """`<name>.<tag>-<n><suffix>` beside `path`, with the first n not taken."""
    n = 1
    while (target := path.with_name(f"{path.stem}.{tag}-{n}{path.suffix}")).exists():
        n += 1
    return target


def _set_aside(ckpt_root: Path, info: DistInfo) -> Path:
    """Move checkpoints of another config/data out of the way (kept, never deleted)."""
    target = _free_name(ckpt_root, "stale")
    barrier(info)  # every rank has finished reading the checkpoint before it moves
    if info.is_main:
        ckpt_root.rename(target)
    barrier(info)
    return target


def _config_diff(theirs: dict[str, Any], ours: dict[str, Any]) -> str:
    keys = sorted(set(theirs) | set(ours))
    return "; ".join(
        f"{k}: checkpoint {theirs.get(k)!r} != now {ours.get(k)!r}"
        for k in keys
        if theirs.get(k) != ours.get(k)
    )


def train(
    cfg: TrainConfig,
    *,
    train_bins: Sequence[Path | str],
    val_bin: Path | str | None,
    run_dir: Path | str,
    runtime: RuntimeConfig = RuntimeConfig(),
) -> TrainResult:
    run_dir = Path(run_dir)
    info = init_distributed(runtime.device)
    try:
        return _train(
            cfg,
            [Path(p) for p in train_bins],
            Path(val_bin) if val_bin else None,
            run_dir,
            runtime,
            info,
        )
    finally:
        shutdown(info)


def _train(
    cfg: TrainConfig,
    train_bins: list[Path],
    val_bin: Path | None,
    run_dir: Path,
    runtime: RuntimeConfig,
    info: DistInfo,
) -> TrainResult:
    started = utc_now()
    cfg.validate(info.world_size)
    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    if runtime.deterministic:
        set_deterministic()
    device = info.device
    ckpt_root = layout.checkpoints_dir(run_dir)
    model = build_cell_model(cfg).to(device)
    # Every run start (fresh or resumed) hashes the shards in full against their manifests, so a
    # shard edited in place (same size) is caught before a step reads it: one sequential read per
    # run, on the main rank (BENCHMARKS.md: "Shard verification"); the others wait at the barrier.
    loader = TrainLoader(
        train_bins,
        context=cfg.context,
        global_batch=cfg.global_batch,
        seed=cfg.seed,
        rank=info.rank,
        world_size=info.world_size,
        vocab=cfg.vocab,
        verify_sha256=info.is_main,
        progress=runtime.progress,
    )
    barrier(info)
    _check_model_vocab(cfg, model)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    train_fp = cfg.fingerprint()

    start_step, resumed_from, stale = 0, None, None
    ref = ckpt.latest_checkpoint(ckpt_root)
    if ref is not None:
        loaded = ckpt.load_checkpoint(ref.path, device)
        state = loaded["state"]
        try:
            if state["train_fingerprint"] != train_fp:
                raise ConfigMismatch(
                    f"refusing to resume from {ref.path}: it was trained with a different config ("
                    + _config_diff(state["train_config"], cfg.to_dict())
                    + f"). Use the same config, or a new run directory (or delete {ckpt_root})"
                )
            loader.load_state_dict(state["loader"])  # refuses different data
        except (ConfigMismatch, DataMismatchError) as exc:
            if not runtime.restart_on_mismatch:
                raise
            stale = (_set_aside(ckpt_root, info), str(exc))
            ref = None
    if ref is not None:
        model.load_state_dict(loaded["model"])
        opt.load_state_dict(loaded["optim"])
        ckpt.set_rng_state(loaded["rng"])
        start_step, resumed_from = int(state["step"]), ref.path
        if ref.path.name == ckpt.FINAL:
            return TrainResult(
                run_dir,
                ref.path,
                start_step,
                start_step,
                state.get("train_loss"),
                state.get("val_loss"),
            )

    metrics = layout.metrics_file(run_dir)
    if info.is_main:  # the metrics of exactly the run the checkpoints belong to
        rewind_metrics(
            metrics, start_step, stale[0] / metrics.name if stale else _free_name(metrics, "stale")
        )

    raw_model = model
    acc = account_model(raw_model, cfg.context)
    if runtime.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    ddp = (
        DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        if info.enabled
        else None
    )
    use_bf16 = runtime.bf16 and device.type == "cuda"

    def autocast() -> Any:
        return (
            torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
        )

    log = (
        MetricsLog(
            metrics,
            run_dir / "tensorboard" if runtime.tensorboard else None,
            run_dir / "dvclive" if runtime.dvclive else None,
        )
        if info.is_main
        else None
    )
    peak = peak_flops(device_name(device))
    max_steps = cfg.max_steps
    n_micro = loader.local_batch // cfg.micro_batch
    if log:
        log.write(
            {
                "kind": "start",
                "step": start_step,
                "resumed_from": str(resumed_from) if resumed_from else None,
                "set_aside": {"checkpoints": str(stale[0]), "because": stale[1]} if stale else None,
                "max_steps": max_steps,
                "world_size": info.world_size,
                "device": device_name(device),
                "params": acc.total_params,
                "train_flops_per_token": acc.train_flops,
                "train_config": cfg.to_dict(),
                "code": code_version(),
            }
        )

    manifest = None
    if info.is_main:  # the data the checkpoints come from, with the sha256 their manifests record
        data = [input_record(s.path, s.sha256, role="train_tokens") for s in loader.shards]
        if val_bin is not None:
            data.append(
                input_record(val_bin, recorded_sha256(val_bin, "tokens"), role="val_tokens")
            )
        manifest = ckpt.ManifestInfo(inputs=data, started=started, device=str(device))

    def save(name: str, step: int, extra: dict[str, Any]) -> Path:
        path = ckpt_root / name
        if info.is_main:
            state = {
                "step": step,
                "tokens": step * cfg.tokens_per_step,
                "loader": loader.state_dict(),
                "train_config": cfg.to_dict(),
                "train_fingerprint": train_fp,
                "model_config": raw_model.cfg.to_dict(),
                "code": code_version(),
                "env": environment(str(device)),
                "world_size": info.world_size,
                **extra,
            }
            ckpt.save_checkpoint(
                ckpt_root,
                name,
                model_state=raw_model.state_dict(),
                optim_state=opt.state_dict(),
                state=state,
                manifest=manifest,
            )
            ckpt.prune(ckpt_root, runtime.keep_last)
        barrier(info)
        return path

    def validate(step: int) -> float | None:
        if val_bin is None:
            return None
        val = evaluate_val_loss(
            raw_model,
            val_bin,
            context=cfg.context,
            batch=runtime.val_batch,
            windows=runtime.val_windows,
            info=info,
            vocab=cfg.vocab,
            autocast=autocast(),
        )
        if log:
            log.write(
                {"kind": "val", "step": step, "tokens": step * cfg.tokens_per_step, "val_loss": val}
            )
        return val

    bar = None
    if info.is_main and runtime.progress:
        from tqdm import tqdm

        bar = tqdm(
            total=max_steps,
            initial=start_step,
            desc=f"{cfg.scale}/{cfg.vocab}/{cfg.variant}",
            unit="step",
        )
    model.train()
    loss_value: float | None = None
    val_loss: float | None = None
    last_good = str(resumed_from) if resumed_from else "none (no checkpoint yet)"
    try:
        with _SignalFlag() as flag:
            for step in range(start_step, max_steps):
                t0 = time.perf_counter()
                lr = lr_at(
                    step,
                    peak=cfg.lr,
                    warmup=cfg.warmup,
                    total=max_steps,
                    min_ratio=cfg.min_lr_ratio,
                )
                for group in opt.param_groups:
                    group["lr"] = lr
                x, y = loader.batch(step)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                total = torch.zeros((), dtype=torch.float64, device=device)
                for i, (xm, ym) in enumerate(_micro_batches(x, y, cfg.micro_batch)):
                    sync = ddp is None or i == n_micro - 1
                    with contextlib.nullcontext() if sync else ddp.no_sync(), autocast():  # type: ignore[union-attr]
                        loss = (ddp or model)(xm, ym)  # through DDP's forward: grads all-reduced
                    (loss / n_micro).backward()
                    total += loss.detach().double() / n_micro
                all_reduce_sum(total, info)
                # Host syncs, once per optimizer step (none per micro-batch): the loss and the
                # gradient norm are read for the non-finite checks and the metrics log, and
                # the stop flag below so that every rank stops at the same step.
                loss_value = float(total) / info.world_size
                if not math.isfinite(loss_value):
                    raise NonFiniteLoss(
                        f"non-finite training loss {loss_value} at step {step} "
                        f"(lr {lr:.3g}); nothing was saved. Last good checkpoint: {last_good}. "
                        "Lower train.lr or check the data, then resume or restart"
                    )
                clip = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
                grad_norm = float(torch.nn.utils.clip_grad_norm_(raw_model.parameters(), clip))
                if not math.isfinite(grad_norm):  # same value on every rank (all-reduced grads)
                    raise NonFiniteLoss(
                        f"non-finite gradient norm {grad_norm} at step {step} (loss {loss_value:.4f}, "
                        f"lr {lr:.3g}); the update was not applied and nothing was saved. Last good "
                        f"checkpoint: {last_good}. Lower train.lr or check the data, then resume or restart"
                    )
                opt.step()
                opt.zero_grad(set_to_none=True)
                loader.step = step + 1
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dt = time.perf_counter() - t0
                done = step + 1
                tok_s = cfg.tokens_per_step / dt
                if log and (done % runtime.log_every == 0 or done == max_steps):
                    log.write(
                        {
                            "kind": "train",
                            "step": done,
                            "tokens": done * cfg.tokens_per_step,
                            "loss": loss_value,
                            "lr": lr,
                            "grad_norm": grad_norm,
                            "tokens_per_s": tok_s,
                            "step_s": dt,
                            "mfu": mfu(tok_s, acc.train_flops, peak, info.world_size),
                        }
                    )
                if bar:
                    bar.set_postfix(loss=f"{loss_value:.4f}", tok_s=f"{tok_s:,.0f}", refresh=False)
                    bar.update(1)
                if done == max_steps:
                    break
                if runtime.val_every and done % runtime.val_every == 0:
                    val_loss = validate(done)
                stop = torch.tensor([flag.signum], dtype=torch.float64, device=device)
                all_reduce_sum(stop, info)  # every rank stops at the same step
                if stop.item():
                    path = save(
                        layout.step_dir(ckpt_root, done).name, done, {"train_loss": loss_value}
                    )
                    raise Preempted(flag.signum or signal.SIGTERM, path)
                if runtime.ckpt_every and done % runtime.ckpt_every == 0:
                    last_good = str(
                        save(
                            layout.step_dir(ckpt_root, done).name, done, {"train_loss": loss_value}
                        )
                    )
        val_loss = validate(max_steps)
        final = save(ckpt.FINAL, max_steps, {"train_loss": loss_value, "val_loss": val_loss})
        if log:
            log.write(
                {"kind": "end", "step": max_steps, "train_loss": loss_value, "val_loss": val_loss}
            )
        return TrainResult(run_dir, final, max_steps, start_step, loss_value, val_loss)
    finally:
        if bar:
            bar.close()
        if log:
            log.close()

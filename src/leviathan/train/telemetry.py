"""Training telemetry: device peak FLOP/s for MFU, JSONL metrics, optional TensorBoard and
DVCLive views, the progress bar, and the rewind of a run's metrics to its checkpoint."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from leviathan.gpus import gpu_model
from leviathan.provenance import code_version
from leviathan.train.config import RuntimeConfig, TrainConfig
from leviathan.train.distributed import DistInfo


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def peak_flops(name: str) -> float | None:
    """The device's dense bf16 peak (`leviathan.gpus`), or None where we do not know it."""
    model = gpu_model(name)
    return model.bf16_flops if model else None


def mfu(
    tokens_per_s: float, flops_per_token: int, peak: float | None, n_devices: int
) -> float | str:
    """Model FLOPs utilisation, or "unknown" when the device's peak is not known."""
    if peak is None:
        return "unknown"
    return tokens_per_s * flops_per_token / (peak * n_devices)


@dataclass(frozen=True)
class StepRecord:
    """What one optimizer step reports: `step` steps are done (1-based), the step's mean
    training loss, its learning rate, the gradient norm before clipping, its seconds."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    seconds: float


class MetricsLog:
    """Append-only JSONL (one object per line) plus optional live views of the same scalars:
    TensorBoard (`tensorboard_dir`) and DVCLive (`dvclive_dir`: `<kind>/<key>.tsv` per scalar
    under plots/metrics/, the latest values in metrics.json; `dvc plots show <dir>/plots/metrics`
    or the VS Code DVC extension draws them while training runs)."""

    def __init__(
        self, path: Path, tensorboard_dir: Path | None = None, dvclive_dir: Path | None = None
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh: TextIO = open(path, "a", buffering=1)
        self._tb = None
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # tensorboard is optional
                raise ValueError(
                    "runtime.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from exc
            self._tb = SummaryWriter(str(tensorboard_dir))
        self._live = _dvclive(dvclive_dir) if dvclive_dir is not None else None

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        if self._tb is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "time"):
                    self._tb.add_scalar(
                        f"{record.get('kind', 'train')}/{key}", value, record["step"]
                    )
        if self._live is not None and "step" in record:
            self._live.step = int(record["step"])
            for key, value in _scalars(record):
                self._live.log_metric(f"{record.get('kind', 'train')}/{key}", value)
            self._live.make_summary()

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()
        if self._live is not None:
            self._live.end()


class TrainTelemetry:
    """What a training run reports: the records of its metrics log (`log`, the main rank's;
    None on the others) and the progress bar (main rank, `runtime.progress`). Closing it
    closes both."""

    def __init__(
        self,
        log: MetricsLog | None,
        *,
        cfg: TrainConfig,
        runtime: RuntimeConfig,
        info: DistInfo,
        flops_per_token: int,
    ) -> None:
        self.log, self.cfg, self.runtime, self.info = log, cfg, runtime, info
        self.flops_per_token = flops_per_token
        self.device = device_name(info.device)
        self.peak = peak_flops(self.device)
        self.bar: Any = None

    def start(
        self,
        step: int,
        *,
        params: int,
        resumed_from: Path | None,
        set_aside: Path | None,
        because: str | None,
    ) -> None:
        """The run's first record: what it trains, where it resumed from, what was set aside."""
        if self.log:
            self.log.write(
                {
                    "kind": "start",
                    "step": step,
                    "resumed_from": str(resumed_from) if resumed_from else None,
                    "set_aside": {"checkpoints": str(set_aside), "because": because}
                    if set_aside
                    else None,
                    "max_steps": self.cfg.max_steps,
                    "world_size": self.info.world_size,
                    "device": self.device,
                    "params": params,
                    "train_flops_per_token": self.flops_per_token,
                    "train_config": self.cfg.to_dict(),
                    "code": code_version(),
                }
            )

    def show_progress(self, step: int) -> None:
        """The progress bar, from `step` (main rank, with `runtime.progress`)."""
        if self.info.is_main and self.runtime.progress:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.cfg.max_steps,
                initial=step,
                desc=f"{self.cfg.scale}/{self.cfg.vocab}/{self.cfg.variant}",
                unit="step",
            )

    def should_log(self, step: int) -> bool:
        """Whether step `step` (1-based) gets a record: every `runtime.log_every` and the last."""
        return step % self.runtime.log_every == 0 or step == self.cfg.max_steps

    def train_step(self, record: StepRecord) -> None:
        """After an optimizer step: its record where `should_log` says so, and the bar."""
        tok_s = self.cfg.tokens_per_step / record.seconds
        if self.log and self.should_log(record.step):
            self.log.write(
                {
                    "kind": "train",
                    "step": record.step,
                    "tokens": record.step * self.cfg.tokens_per_step,
                    "loss": record.loss,
                    "lr": record.lr,
                    "grad_norm": record.grad_norm,
                    "tokens_per_s": tok_s,
                    "step_s": record.seconds,
                    "mfu": mfu(tok_s, self.flops_per_token, self.peak, self.info.world_size),
                }
            )
        if self.bar:
            self.bar.set_postfix(loss=f"{record.loss:.4f}", tok_s=f"{tok_s:,.0f}", refresh=False)
            self.bar.update(1)

    def val(self, step: int, val_loss: float) -> None:
        if self.log:
            self.log.write(
                {
                    "kind": "val",
                    "step": step,
                    "tokens": step * self.cfg.tokens_per_step,
                    "val_loss": val_loss,
                }
            )

    def end(self, step: int, *, train_loss: float | None, val_loss: float | None) -> None:
        if self.log:
            self.log.write(
                {"kind": "end", "step": step, "train_loss": train_loss, "val_loss": val_loss}
            )

    def __enter__(self) -> TrainTelemetry:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar:
            self.bar.close()
        if self.log:
            self.log.close()


def _scalars(record: dict[str, Any]) -> list[tuple[str, float]]:
    return [
        (k, float(v))
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")
    ]


def _dvclive(directory: Path) -> Any:
    """A DVCLive logger that only writes its directory: no dvc.yaml edits, no DVC experiment
    commits, no report (the project's dvc.yaml and `dvc exp` stay the user's). Resumes appending
    when training resumes."""
    try:
        from dvclive import Live
    except ImportError as exc:  # dvclive is optional
        raise ValueError(
            "runtime.dvclive=true needs the dvclive package: pip install 'leviathan[live]'"
        ) from exc
    return Live(dir=str(directory), resume=True, report=None, save_dvc_exp=False, dvcyaml=False)


def rewind_metrics(path: Path, step: int, aside: Path) -> int:
    """Keep in `path` only the records of the run up to `step` (the checkpoint a run resumes
    from; 0: a fresh start keeps nothing); move the others to `aside` (kept, never deleted).

    A run directory then holds the metrics of exactly the run its checkpoints belong to: no
    points of a set-aside run, and no steps logged after the newest checkpoint by a run that
    died (they are recomputed). Returns the number of records moved.
    """
    if not path.is_file():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    keep: list[str] = []
    moved: list[str] = []
    for line in lines:
        (keep if step > 0 and int(json.loads(line).get("step", 0)) <= step else moved).append(line)
    if moved:
        aside.parent.mkdir(parents=True, exist_ok=True)
        with open(aside, "a") as fh:
            fh.writelines(line + "\n" for line in moved)
    # a new file, never the old one edited: it may be a hard link into DVC's cache (docs/dvc.md)
    if moved or path.stat().st_nlink > 1:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(path)
    return len(moved)


def read_metrics(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Records of a metrics JSONL, optionally only those of one kind ("train", "val", ...)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if kind is None or r.get("kind") == kind]

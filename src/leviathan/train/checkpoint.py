"""Checkpoints: atomic directories, safe formats, newest-complete discovery, retention.

A checkpoint is a directory `<run>/checkpoints/step_<N>/` (or `final/`; names: leviathan.layout)
holding
  model.safetensors   the weights (safetensors: no pickle)
  optim.pt            optimizer state (loaded with torch.load(weights_only=True))
  rng.pt              torch CPU/CUDA, numpy and python RNG states (weights_only too)
  state.json          step, tokens, loader state (with its data fingerprint), the train and
                      model configs with the config fingerprint, code version, metrics
  model.safetensors.json
                      the manifest (kind "checkpoint", `leviathan.manifest`): sha256 of the
                      weights, the token shards trained and validated on (with the sha256
                      their manifests record), the train config and its sha256, state.json's
                      sha256, code, environment, start/end time. Never read when resuming.
It is written under a temporary name and renamed into place only when complete, so a
directory named `step_*`/`final` is always whole; `state.json` and then the manifest are
written last (the manifest records the final directory's path, not the temporary one).

`CheckpointManager` is the trainer's side: it owns the model, optimizer, data loader (stateful
by contract, `Stateful`) and train state of a run, writes them together and restores them on a
restart (refusing, or setting aside, checkpoints of another config or other data).

Saving without stalling. A checkpoint is a snapshot taken at the end of a step: weights,
optimizer state and RNG states copied to host memory (`snapshot`), then written. With
`background=True` the write (serialisation, fsync, rename, manifest hash, pruning) runs in one
writer thread while training goes on; the next save first waits for the previous one, so at
most one snapshot is held (one checkpoint's size in host RAM: 13.4 GB at 1.2b) and writes never
overlap. Preemption and final saves are written in line (`wait()` before returning), and
`close()` waits for a pending write, so a process never exits with a checkpoint half-written
by its own thread. The files are the same bytes as an in-line save of the same step.
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from leviathan.data.loader import DataMismatchError
from leviathan.io import publish_dir, read_json, sha256_file, write_json
from leviathan.layout import FINAL, OPTIM, RNG, STATE, WEIGHTS, step_dir, step_of
from leviathan.manifest import display_path, write_manifest
from leviathan.model import LanguageModel
from leviathan.provenance import code_version, environment
from leviathan.train.config import TrainConfig
from leviathan.train.distributed import DistInfo, barrier
from leviathan.train.errors import ConfigMismatch, config_mismatch

MANIFEST_KIND = "checkpoint"


@dataclass(frozen=True)
class ManifestInfo:
    """What a checkpoint's manifest records beyond the checkpoint itself."""

    inputs: Sequence[Mapping[str, str]]  # {"role", "path", "sha256"} of the token shards
    started: _dt.datetime | None = None  # when the training process began
    device: str | None = None


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    step: int


def _numpy_state() -> list[Any]:
    _, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    return [keys.tolist(), int(pos), int(has_gauss), float(cached)]


def seed_rngs(seed: int) -> None:
    """Seed every generator a checkpoint records (torch, NumPy's and Python's global ones), so
    that two runs of a cell save the same `rng.pt` byte for byte, as they save the same weights."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": _numpy_state(),
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(("MT19937", np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def to_host(obj: Any, copy: bool = True) -> Any:
    """`obj` (nested dicts/lists/tuples of tensors and plain values) with its tensors detached in
    host memory; `copy`: always copies, so later in-place updates of the originals do not reach
    it (without, host tensors are shared)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=copy)
    if isinstance(obj, dict):
        return {k: to_host(v, copy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(v, copy) for v in obj)
    return obj


@dataclass(frozen=True)
class Snapshot:
    """Everything one checkpoint holds, in host memory, taken at the end of a step."""

    model_state: dict[str, torch.Tensor]
    optim_state: dict[str, Any]
    rng: dict[str, Any]
    state: dict[str, Any]

    @property
    def nbytes(self) -> int:
        tensors: list[torch.Tensor] = []

        def collect(obj: Any) -> None:
            if isinstance(obj, torch.Tensor):
                tensors.append(obj)
            elif isinstance(obj, dict):
                for v in obj.values():
                    collect(v)
            elif isinstance(obj, (list, tuple)):
                for v in obj:
                    collect(v)

        collect([self.model_state, self.optim_state])
        return sum(t.numel() * t.element_size() for t in tensors)


def snapshot(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    copy: bool = True,
) -> Snapshot:
    """What a checkpoint holds, in host memory now (RNG states included); `copy`: a copy that
    training may go on from (for a background write), else sharing the host tensors."""
    return Snapshot(
        model_state=to_host(model.state_dict(), copy),
        optim_state=to_host(optimizer.state_dict(), copy),
        rng=rng_state(),
        state=state,
    )


def save_checkpoint(
    root: Path,
    name: str,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any],
    state: dict[str, Any],
    manifest: ManifestInfo | None = None,
    rng: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoint `root/name` atomically (temp dir + rename) and return its path.

    With `manifest`, `model.safetensors.json` is written inside the temporary directory
    after state.json, so a visible checkpoint always has it. `rng`: the RNG states to record
    (default: the current ones).
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".{name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in model_state.items()}, tmp / WEIGHTS)
        torch.save(optim_state, tmp / OPTIM)
        torch.save(rng if rng is not None else rng_state(), tmp / RNG)
        write_json(tmp / STATE, state)
        if manifest is not None:
            _write_manifest(tmp, final, state, manifest)
        publish_dir(tmp, final)  # on disk, then renamed; an old `final` is replaced whole
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_manifest(tmp: Path, final: Path, state: dict[str, Any], info: ManifestInfo) -> None:
    write_manifest(
        tmp / WEIGHTS,
        kind=MANIFEST_KIND,
        recorded_path=final / WEIGHTS,
        inputs=info.inputs,
        config=state["train_config"],
        started=info.started,
        device=info.device,
        fields={
            "checkpoint_dir": display_path(final),
            "step": state["step"],
            "tokens": state["tokens"],
            "train_fingerprint": state["train_fingerprint"],
            "state_sha256": sha256_file(tmp / STATE),
            "model_config": state["model_config"],
        },
    )


def list_checkpoints(root: Path) -> list[CheckpointRef]:
    """Complete step checkpoints under `root`, oldest first (`final` not included)."""
    if not root.is_dir():
        return []
    refs = []
    for p in root.iterdir():
        step = step_of(p)
        if step is not None and p.is_dir() and (p / STATE).is_file():
            refs.append(CheckpointRef(p, step))
    return sorted(refs, key=lambda r: r.step)


def latest_checkpoint(root: Path) -> CheckpointRef | None:
    """The newest complete checkpoint: `final` if present, else the highest step."""
    final = root / FINAL
    if (final / STATE).is_file():
        return CheckpointRef(final, int(read_json(final / STATE)["step"]))
    refs = list_checkpoints(root)
    return refs[-1] if refs else None


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` step checkpoints (and `final`); remove stale temp dirs."""
    refs = list_checkpoints(root)
    for ref in refs[: max(0, len(refs) - keep_last)]:
        shutil.rmtree(ref.path, ignore_errors=True)
    # leftovers of writers killed mid-write (another pid: never renamed into place)
    for p in root.iterdir():
        if (
            p.name.startswith(".")
            and p.name.endswith((".tmp", ".old"))
            and f".{os.getpid()}." not in p.name
        ):
            shutil.rmtree(p, ignore_errors=True)


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint directory: {'model', 'optim', 'rng', 'state'} (safe loaders only)."""
    if not (path / STATE).is_file():
        raise FileNotFoundError(f"{path}: not a complete checkpoint (no {STATE})")
    return {
        "model": load_file(path / WEIGHTS, device=str(device)),
        "optim": torch.load(path / OPTIM, map_location=device, weights_only=True),
        "rng": torch.load(path / RNG, weights_only=True),
        "state": read_json(path / STATE),
    }


def free_name(path: Path, tag: str) -> Path:
    """`<name>.<tag>-<n><suffix>` beside `path`, with the first n not taken."""
    n = 1
    while (target := path.with_name(f"{path.stem}.{tag}-{n}{path.suffix}")).exists():
        n += 1
    return target


class Stateful(Protocol):
    """The data loader's contract with checkpoints (`leviathan.data.loader.TrainLoader`): its
    position and the fingerprint of its data as a JSON-able dict; `load_state_dict` refuses a
    state of other data with `DataMismatchError`."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Restored:
    """What `CheckpointManager.restore` found: where the run continues from."""

    step: int = 0  # 0: a fresh start
    path: Path | None = None  # the checkpoint resumed from
    state: dict[str, Any] | None = None  # its state.json
    set_aside: Path | None = None  # checkpoints of another config/data, moved here
    because: str | None = None  # why they were set aside

    @property
    def finished(self) -> bool:
        return self.path is not None and self.path.name == FINAL

    def aside_for(self, path: Path) -> Path:
        """Where records of `path` (a run file) that belong to no kept checkpoint go: beside
        the set-aside checkpoints, else under a free `<name>.stale-<n>` name."""
        return self.set_aside / path.name if self.set_aside else free_name(path, "stale")


class CheckpointManager:
    """The checkpoints of one run. It owns what a checkpoint holds: the model's weights, the
    optimizer, the data loader (stateful: its position and data fingerprint), the train state
    (step, tokens, configs, provenance) and the RNG states, and saves or restores them together.
    It decides its own interval: `save_if_due` writes a step checkpoint every `every` steps (0:
    none). Every rank restores; the main rank writes, the others wait at a barrier."""

    def __init__(
        self,
        root: Path,
        *,
        model: LanguageModel,
        optimizer: torch.optim.Optimizer,
        loader: Stateful,
        cfg: TrainConfig,
        info: DistInfo,
        keep_last: int,
        every: int = 0,
        background: bool = False,
        drop_steps_at_final: bool = False,
    ) -> None:
        self.root, self.model, self.optimizer, self.loader = root, model, optimizer, loader
        self.cfg, self.info, self.keep_last, self.every = cfg, info, keep_last, every
        self.background, self.drop_steps_at_final = background, drop_steps_at_final
        self.fingerprint = cfg.fingerprint()
        self.manifest: ManifestInfo | None = None  # set by the trainer on the main rank
        self.last_good = "none (no checkpoint yet)"  # for the error texts
        self._writer: ThreadPoolExecutor | None = None
        self._pending: Future[Path] | None = None

    def restore(self, restart_on_mismatch: bool) -> Restored:
        """Load the newest complete checkpoint into model, optimizer, loader and RNG. One of
        another config or other data is refused, or with `restart_on_mismatch` set aside."""
        ref = latest_checkpoint(self.root)
        if ref is None:
            return Restored()
        loaded = load_checkpoint(ref.path, self.info.device)
        state = loaded["state"]
        try:
            if state["train_fingerprint"] != self.fingerprint:
                raise config_mismatch(
                    ref.path, state["train_config"], self.cfg.to_dict(), self.root
                )
            self.loader.load_state_dict(state["loader"])  # refuses different data
        except (ConfigMismatch, DataMismatchError) as exc:
            if not restart_on_mismatch:
                raise
            return Restored(set_aside=self._set_aside(), because=str(exc))
        self.model.load_state_dict(loaded["model"])
        self.optimizer.load_state_dict(loaded["optim"])
        set_rng_state(loaded["rng"])
        self.last_good = str(ref.path)
        return Restored(step=int(state["step"]), path=ref.path, state=state)

    def _set_aside(self) -> Path:
        """Move the checkpoints out of the way (kept, never deleted)."""
        target = free_name(self.root, "stale")
        barrier(self.info)  # every rank has finished reading the checkpoint before it moves
        if self.info.is_main:
            self.root.rename(target)
        barrier(self.info)
        return target

    def save_if_due(self, step: int, train_loss: float | None) -> Path | None:
        """The periodic checkpoint after optimizer step `step`, where the interval falls."""
        if self.every and step % self.every == 0:
            return self.save_step(step, train_loss)
        return None

    def save_step(self, step: int, train_loss: float | None, *, wait: bool = False) -> Path:
        """A periodic (or, with `wait`, preemption) checkpoint; it becomes the last good one.
        Written in the background where the manager says so, unless `wait`."""
        name = step_dir(self.root, step).name
        path = self._save(
            name, step, background=self.background and not wait, train_loss=train_loss
        )
        # named as soon as it is taken: every exit path waits for its write (close)
        self.last_good = str(path)
        return path

    def save_final(self, step: int, train_loss: float | None, val_loss: float | None) -> Path:
        path = self._save(FINAL, step, train_loss=train_loss, val_loss=val_loss)
        if self.drop_steps_at_final and self.info.is_main:
            prune(self.root, 0)  # `final` holds everything a step checkpoint would resume
        barrier(self.info)
        return path

    def _save(
        self, name: str, step: int, *, background: bool = False, **metrics: float | None
    ) -> Path:
        """Write checkpoint `name` after optimizer step `step` (main rank), keep the newest
        `keep_last` step checkpoints. In line: every rank returns once it is written. With
        `background`: once the main rank has its host snapshot (after the previous write)."""
        if self.info.is_main:
            self.wait()  # one write at a time, one snapshot held
            state = self._train_state(step, metrics)
            snap = snapshot(self.model, self.optimizer, state, copy=background)
            if background:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix="leviathan-ckpt")
                self._pending = self._writer.submit(self._write, name, snap)
            else:
                self._write(name, snap)
        barrier(self.info)
        return self.root / name

    def _write(self, name: str, snap: Snapshot) -> Path:
        path = save_checkpoint(
            self.root,
            name,
            model_state=snap.model_state,
            optim_state=snap.optim_state,
            state=snap.state,
            manifest=self.manifest,
            rng=snap.rng,
        )
        prune(self.root, self.keep_last)
        return path

    def wait(self) -> None:
        """Return once a background write is on disk; raise its error if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for a pending write and stop the writer thread."""
        try:
            self.wait()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None

    def _train_state(self, step: int, metrics: dict[str, float | None]) -> dict[str, Any]:
        return {
            "step": step,
            "tokens": step * self.cfg.tokens_per_step,
            "loader": self.loader.state_dict(),
            "train_config": self.cfg.to_dict(),
            "train_fingerprint": self.fingerprint,
            "model_config": self.model.cfg.to_dict(),
            "code": code_version(),
            "env": environment(str(self.info.device)),
            "world_size": self.info.world_size,
            **metrics,
        }

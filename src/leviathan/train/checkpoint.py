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
                      weights and (`files`) of optim.pt, rng.pt and state.json, the token
                      shards trained and validated on (with the sha256 their manifests
                      record), the train config and its sha256, code, environment, start/end
                      time, (`resumed_from`) the verified checkpoint the run resumed from,
                      (`metrics_log`) the sha256 of the run's log up to this step (log_anchor.py)
                      and (`state`) state.json whole: a rerun puts it back (finished.py).
It is written under a temporary name and renamed into place only when complete, so a
directory named `step_*`/`final` is always whole; `state.json` and then the manifest are
written last (the manifest records the final directory's path, not the temporary one).
A full disk during a save is one line (`leviathan.io.DiskFull`); the older checkpoints stay.

`CheckpointManager` is the trainer's side: it owns the model, optimizer, data loader (stateful
by contract, `Stateful`) and train state of a run, writes them together and restores them on a
restart. Before a restore every file of the newest checkpoint is checked against its manifest
(`integrity.py`); a damaged one (a file missing, unreadable or changed) is set aside as
`<name>.damaged-<n>` with a WARNING naming the file and the next older one is tried. One of
another config or other data is refused, or set aside. Retention never removes the checkpoint
just written, whatever `keep_last` it is given.

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
import logging
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
from safetensors.torch import save_file

from leviathan.data.loader import DataMismatchError
from leviathan.io import disk_full, free_name, no_space, publish_dir, read_json, write_json
from leviathan.layout import (
    FINAL,
    OPTIM,
    RNG,
    STATE,
    WEIGHTS,
    kept_dir,
    metrics_file,
    step_dir,
    step_of,
)
from leviathan.model import LanguageModel
from leviathan.provenance import code_version, environment
from leviathan.train.config import CheckpointConfig, TrainConfig
from leviathan.train.distributed import DistInfo, all_reduce_sum, barrier
from leviathan.train.errors import ConfigMismatch, NoIntactCheckpoint, config_mismatch
from leviathan.train.finished import STATE_FIELD, reinstate_state
from leviathan.train.integrity import (
    DamagedCheckpoint,
    Verified,
    file_hashes,
    read_checkpoint_files,
    verify_checkpoint,
    write_checkpoint_manifest,
)
from leviathan.train.kept import list_kept, write_kept
from leviathan.train.log_anchor import PREFIX_FIELD, log_prefix
from leviathan.train.schedule import keep_steps

MANIFEST_ARTIFACT_TYPE = "checkpoint"
log = logging.getLogger("leviathan.train")


@dataclass(frozen=True)
class ManifestInfo:
    """What a checkpoint's manifest records beyond the checkpoint itself."""

    inputs: Sequence[Mapping[str, str]]  # {"role", "path", "sha256"} of the token shards
    started: _dt.datetime | None = None  # when the training process began
    device: str | None = None
    resumed_from: Mapping[str, Any] | None = None  # `Verified.record` of the restored one


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
        return tensor_bytes([self.model_state, self.optim_state])


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in `obj` (nested dicts/lists/tuples): about a checkpoint's size."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


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
    (default: the current ones). A full disk raises `DiskFull` (one line: the path, the bytes,
    the fix); nothing is left of the attempt and older checkpoints are untouched.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".{name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_file({k: v.detach().contiguous().cpu() for k, v in model_state.items()}, tmp / WEIGHTS)
        torch.save(optim_state, tmp / OPTIM)
        torch.save(rng if rng is not None else rng_state(), tmp / RNG)
        write_json(tmp / STATE, state)
        if manifest is not None:
            _write_manifest(tmp, final, state, manifest)
        publish_dir(tmp, final)  # on disk, then renamed; an old `final` is replaced whole
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # the space it took, before measuring
        needed = tensor_bytes([model_state, optim_state])
        if no_space(exc, root, needed):
            fix = (
                "free space there (or lower runtime.checkpoint.keep_last), then rerun: it resumes from "
                f"the newest checkpoint left, {_newest(root)}"
            )
            raise disk_full(final, needed, fix) from exc
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _newest(root: Path) -> str:
    ref = latest_checkpoint(root)
    return str(ref.path) if ref else "none (it starts afresh)"


def _write_manifest(
    tmp: Path,
    final: Path,
    state: dict[str, Any],
    info: ManifestInfo,
    files: dict[str, str] | None = None,
) -> None:
    """The manifest of checkpoint `tmp` (to be `final`); `files`: the hashes of the files
    beside the weights (default: optim.pt, rng.pt, state.json, hashed here)."""
    write_checkpoint_manifest(
        tmp,
        final,
        state,
        info,
        artifact_type=MANIFEST_ARTIFACT_TYPE,
        files=files or file_hashes(tmp),
        extra={
            "resumed_from": dict(info.resumed_from) if info.resumed_from else None,
            "kept": list_kept(final.parent),  # the kept checkpoints written so far (kept.py)
            # the run's log up to this step (log_anchor.py): fixes every record it holds
            PREFIX_FIELD: log_prefix(metrics_file(final.parent.parent), int(state["step"])),
            STATE_FIELD: state,  # state.json whole, for a rerun that finds it deleted
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
    """The newest complete checkpoint: `final` if present, else the highest step (a `final`
    whose state.json cannot be read has step -1: verifying it sets it aside)."""
    final = root / FINAL
    if (final / STATE).is_file():
        try:
            step = int(read_json(final / STATE)["step"])
        except (OSError, ValueError, KeyError, TypeError):
            step = -1
        return CheckpointRef(final, step)
    refs = list_checkpoints(root)
    return refs[-1] if refs else None


def prune(root: Path, keep_last: int, keep: Path | None = None) -> None:
    """Keep the newest `keep_last` step checkpoints (and `final`, and `keep`: the one just
    written, whatever `keep_last` says); remove stale temp dirs."""
    refs = [r for r in list_checkpoints(root) if keep is None or r.path != keep]
    kept = max(0, keep_last - (keep is not None and step_of(keep) is not None))
    for ref in refs[: max(0, len(refs) - kept)]:
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
    return read_checkpoint_files(path, device)


# state.json's `optim_format` of a checkpoint whose optimizer state is sharded (DCP,
# `leviathan.train.dcp_checkpoint`); absent: optim.pt, the whole state
SHARDED_FORMAT = "dcp"


def is_sharded_checkpoint(path: Path) -> bool:
    """Whether checkpoint `path` holds its optimizer state sharded (an FSDP run's, DCP); False
    where its state.json cannot be read (the integrity check names it)."""
    try:
        return read_json(path / STATE).get("optim_format") == SHARDED_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def set_aside_damaged(damage: DamagedCheckpoint) -> dict[str, str]:
    """Set a damaged checkpoint aside as `<name>.damaged-<n>` (kept), a WARNING; its record."""
    target = free_name(damage.checkpoint, "damaged")
    damage.checkpoint.rename(target)
    where, file, reason = str(damage.checkpoint), damage.file, damage.reason
    log.warning(
        "checkpoint %s is damaged (%s: %s): set aside as %s; trying the next older one",
        *(where, file, reason, target),
    )
    return {"checkpoint": where, "set_aside": str(target), "file": file, "reason": reason}


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
    verified: Verified | None = None  # the check of the checkpoint resumed from
    damaged: tuple[dict[str, str], ...] = ()  # checkpoints set aside as damaged, newest first

    def resumed_from(self) -> dict[str, Any] | None:
        """What later checkpoints' manifests record of this one (None: a fresh start)."""
        if self.verified is None:
            return None
        return self.verified.record(self.step)

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
    It takes the run's `runtime.checkpoint` block whole (`config`) and decides its own interval:
    `save_if_due` writes a step checkpoint every `config.every` steps (0: none), keeping the
    newest `config.keep_last`. Every rank restores; the main rank writes, the others wait at a
    barrier."""

    def __init__(
        self,
        root: Path,
        *,
        model: LanguageModel,
        optimizer: torch.optim.Optimizer,
        loader: Stateful,
        cfg: TrainConfig,
        info: DistInfo,
        config: CheckpointConfig,
    ) -> None:
        self.root, self.model, self.optimizer, self.loader = root, model, optimizer, loader
        self.cfg, self.info, self.config = cfg, info, config
        # steps whose weights are kept for good (kept.py)
        self.keep_at = frozenset(keep_steps(config.keep_at, cfg.max_steps))
        self.fingerprint = cfg.fingerprint()
        self.manifest: ManifestInfo | None = None  # set by the trainer on the main rank
        self.last_good = "none (no checkpoint yet)"  # for the error texts
        self._writer: ThreadPoolExecutor | None = None
        self._pending: Future[Path] | None = None

    def restore(self, restart_on_mismatch: bool) -> Restored:
        """Load the newest intact checkpoint into model, optimizer, loader and RNG (damaged
        ones set aside). One of another config or other data is refused, or with
        `restart_on_mismatch` set aside."""
        found = self._newest_intact()
        if found is None:
            return Restored()
        ref, loaded, verified, damaged = found
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
        self._load_weights(loaded)
        set_rng_state(loaded["rng"])
        self.last_good = str(ref.path)
        return Restored(
            step=int(state["step"]),
            path=ref.path,
            state=state,
            verified=verified,
            damaged=damaged,
        )

    def _load_weights(self, loaded: dict[str, Any]) -> None:
        """Put a read checkpoint's weights and optimizer state into the model and optimizer."""
        self.model.load_state_dict(loaded["model"])
        if "optim" in loaded:
            self.optimizer.load_state_dict(loaded["optim"])
        else:  # an FSDP run's checkpoint: its optimizer shards read whole
            from leviathan.train.dcp_checkpoint import load_whole_optimizer

            load_whole_optimizer(self.model, self.optimizer, loaded["path"])

    def _read(self, path: Path) -> dict[str, Any]:
        """Read checkpoint `path` (this rank's part of it; an FSDP run's without its optimizer
        shards, which `_load_weights` reads)."""
        if is_sharded_checkpoint(path):
            from leviathan.train.dcp_checkpoint import read_sharded

            return read_sharded(path, device=str(self.info.device))
        return read_checkpoint_files(path, self.info.device)

    def _newest_intact(
        self,
    ) -> tuple[CheckpointRef, dict[str, Any], Verified | None, tuple[dict[str, str], ...]] | None:
        """The newest checkpoint whose files all hash as its manifest records, loaded. The main
        rank checks them, newest first, and sets aside each damaged one; the other ranks then
        load the one it kept. None: no checkpoint (a fresh start); none intact is refused."""
        verified: Verified | None = None
        loaded: dict[str, Any] | None = None
        damaged: list[dict[str, str]] = []
        if self.info.is_main:
            if (lost := reinstate_state(self.root)) is not None:  # a final's deleted state.json
                damaged.append(set_aside_damaged(lost))
            while (ref := latest_checkpoint(self.root)) is not None:
                try:
                    verified = verify_checkpoint(ref.path)
                    loaded = self._read(ref.path)
                    break
                except DamagedCheckpoint as exc:
                    verified = None
                    damaged.append(set_aside_damaged(exc))
        barrier(self.info)  # the damaged ones are out of the way on every rank
        none_left = torch.tensor([float(bool(damaged) and verified is None)])
        if bool(all_reduce_sum(none_left.to(self.info.device), self.info).item()):
            raise NoIntactCheckpoint(self.root, [d["set_aside"] for d in damaged])
        ref = latest_checkpoint(self.root)
        if ref is None:
            return None
        if loaded is None:  # not the main rank: the checkpoint it kept
            loaded = self._read(ref.path)
        return ref, loaded, verified, tuple(damaged)

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
        every = self.config.every
        if every and step % every == 0:
            return self.save_step(step, train_loss)
        return None

    def save_step(self, step: int, train_loss: float | None, *, wait: bool = False) -> Path:
        """A periodic (or, with `wait`, preemption) checkpoint; it becomes the last good one.
        Written in the background where the manager says so, unless `wait`."""
        name = step_dir(self.root, step).name
        path = self._save(
            name, step, background=self.config.background and not wait, train_loss=train_loss
        )
        # named as soon as it is taken: every exit path waits for its write (close)
        self.last_good = str(path)
        return path

    def keep_if_due(self, step: int) -> Path | None:
        """The kept checkpoint of step `step` where `keep_at` names it (0: the initial weights):
        weights and state only, written by the background writer where saves are (kept.py)."""
        if step not in self.keep_at:
            return None
        path = step_dir(kept_dir(self.root), step)
        if self.info.is_main:
            self.wait()  # one write at a time, one snapshot held
            weights = to_host(self.model.state_dict(), copy=self.config.background)
            args = (self.root, step, weights, self._train_state(step, {}), self.manifest)
            if self.config.background:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix="leviathan-ckpt")
                self._pending = self._writer.submit(write_kept, *args)
            else:
                write_kept(*args)
        return path

    def save_final(self, step: int, train_loss: float | None, val_loss: float | None) -> Path:
        path = self._save(FINAL, step, train_loss=train_loss, val_loss=val_loss)
        if self.config.drop_steps_at_final and self.info.is_main:
            prune(self.root, 0)  # `final` holds everything a step checkpoint would resume
        barrier(self.info)
        return path

    def _save(
        self, name: str, step: int, *, background: bool = False, **metrics: float | None
    ) -> Path:
        """Write checkpoint `name` after optimizer step `step` (main rank), keep the newest
        `config.keep_last` step checkpoints. In line: every rank returns once it is written. With
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
        prune(self.root, self.config.keep_last, keep=path)  # never the one a message names
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

"""The trainer's checkpoints: what a run saves and restores, and when.

`CheckpointManager` owns the model, optimizer, data loader (stateful by contract, `Stateful`)
and train state of a run, writes them together (`leviathan.checkpoint`, which names, writes,
verifies and reads a checkpoint's files) and restores them on a restart. Before a restore
every file of the newest checkpoint is checked against its manifest; a damaged one (a file
missing, unreadable or changed) is set aside as `<name>.damaged-<n>` with a WARNING naming the
file and the next older one is tried. One of another config or other data is refused, or set
aside. Retention never removes the checkpoint just written, whatever `keep_last` it is given.

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

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from leviathan.checkpoint.files import FINAL, kept_dir, step_dir
from leviathan.checkpoint.integrity import (
    DamagedCheckpoint,
    Verified,
    reinstate_state,
    verify_checkpoint,
)
from leviathan.checkpoint.kept import write_kept
from leviathan.checkpoint.read import read_checkpoint_files
from leviathan.checkpoint.rng import set_rng_state
from leviathan.checkpoint.sharded import load_whole_optimizer, read_sharded
from leviathan.checkpoint.store import (
    CheckpointRef,
    ManifestInfo,
    Snapshot,
    is_sharded_checkpoint,
    latest_checkpoint,
    prune,
    save_checkpoint,
    set_aside_damaged,
    snapshot,
    to_host,
)
from leviathan.data.loader import DataMismatchError
from leviathan.io import free_name
from leviathan.layout import metrics_file
from leviathan.manifest import input_record, recorded_sha256
from leviathan.model import LanguageModel
from leviathan.provenance import code_version, environment
from leviathan.train.config import CheckpointConfig, TrainConfig
from leviathan.train.distributed import DistInfo, all_reduce_sum, barrier
from leviathan.train.errors import ConfigMismatch, NoIntactCheckpoint, config_mismatch
from leviathan.train.log_anchor import PREFIX_FIELD, log_prefix
from leviathan.train.schedule import keep_steps


def run_inputs(shards: list[dict[str, Any]], val_bin: Path | None) -> list[dict[str, Any]]:
    """The data a run's checkpoints come from, as their manifests record it: each training
    shard with the check its loader made of it (`shards`), and the validation shard with the
    sha256 its own manifest records."""
    data = list(shards)
    if val_bin is not None:
        val_sha256 = recorded_sha256(val_bin, "tokens")
        data.append(input_record(val_bin, val_sha256, role="val_tokens", check="none"))
    return data


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
        # steps whose weights are kept for good (leviathan.checkpoint.kept)
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
            load_whole_optimizer(self.model, self.optimizer, loaded["path"])

    def _read(self, path: Path) -> dict[str, Any]:
        """Read checkpoint `path` (this rank's part of it; an FSDP run's without its optimizer
        shards, which `_load_weights` reads)."""
        if is_sharded_checkpoint(path):
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
            if (
                lost := reinstate_state(self.root / FINAL)
            ) is not None:  # a final's deleted state.json
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
        weights and state only, written by the background writer where saves are (leviathan.checkpoint.kept)."""
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
            manifest=self._manifest_at(int(snap.state["step"])),
            rng=snap.rng,
        )
        prune(self.root, self.config.keep_last, keep=path)  # never the one a message names
        return path

    def _manifest_at(self, step: int) -> ManifestInfo | None:
        """The run's manifest record for a checkpoint of step `step`, with the sha256 of the
        run's log up to it (log_anchor.py), which fixes every record the log holds."""
        if self.manifest is None:
            return None
        prefix = log_prefix(metrics_file(self.root.parent), step)
        return dataclasses.replace(self.manifest, fields={PREFIX_FIELD: prefix})

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

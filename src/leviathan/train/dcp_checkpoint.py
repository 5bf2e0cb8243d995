"""The checkpoints of an FSDP run (docs/method.md §4; `leviathan.train.fsdp`): the optimizer
state written sharded, each rank its own part (`leviathan.checkpoint.sharded`), the weights
whole, so a run resumes on another number of ranks and every downstream reader (evaluation,
export, the audit) reads the checkpoint as it reads a DDP run's.

The weights are the whole fp32 weights, gathered to the main rank
(`get_model_state_dict(full_state_dict, cpu_offload)`: one all-gather of the parameters, the
traffic of one forward), so the weights are consolidated once, at every save, and never need
converting: a third of the state (4 of 12 bytes per parameter) is written by one rank, the
rest by all.

The same guarantees as DDP's checkpoints: everything is written under a temporary directory
(one name on every rank: the main rank's pid) and renamed into place by the main rank once
every rank's shard is on disk, so a kill mid-save leaves the previous checkpoint whole (and
the next start removes the leftover); periodic saves are written by a background thread per
rank while training goes on (host copies taken at the step; the writers meet on a process
group of their own, so their collectives never interleave with training's); preemption and
final saves wait. Restoring: the main rank verifies every file against the manifest; the
weights are read by the main rank and broadcast (`set_model_state_dict(broadcast_from_rank0)`),
the optimizer state read by every rank for its own shard of the current sharding
(`dcp.load` reshards: 4 ranks' files resume on 2), with the loader position (the same global
batches at every world size) and the main rank's RNG states, as a DDP run. A checkpoint of a
run that did not shard is read whole on every rank, each keeping its part.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from leviathan.checkpoint.files import SHARDED_FORMAT, shards_dir
from leviathan.checkpoint.read import read_checkpoint_files
from leviathan.checkpoint.rng import rng_state
from leviathan.checkpoint.sharded import (
    by_name,
    load_shards,
    read_sharded,
    save_shards,
    sharded_files,
)
from leviathan.checkpoint.store import (
    OPTIM_FORMAT,
    is_sharded_checkpoint,
    prune,
    publish,
    temp_dir,
)
from leviathan.train.checkpoint import CheckpointManager

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class ShardedCheckpointManager(CheckpointManager):
    """`CheckpointManager` for an FSDP run: every rank writes and reads its shard (above)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the writers' own process group (gloo: host tensors), and one temp-dir name on all ranks
        self._group = dist.new_group(backend="gloo")
        pid = torch.tensor([os.getpid()], dtype=torch.long)
        dist.broadcast(pid, src=0, group=self._group)
        self._pid = int(pid.item())
        self._staged: dict[str, Any] | None = None  # the optimizer's host copy, reused

    # --- restoring -------------------------------------------------------------------------
    def _read(self, path: Path) -> dict[str, Any]:
        """The main rank reads the whole weights (host memory); every rank the RNG states and
        the train state; the optimizer's shards are read collectively in `_load_weights`. A
        checkpoint of a run that did not shard (one process, DDP): every rank reads its whole
        optimizer state (optim.pt), and keeps its part in `_load_weights`."""
        if not is_sharded_checkpoint(path):
            keys = (
                ("model", "optim", "rng", "state")
                if self.info.is_main
                else ("optim", "rng", "state")
            )
            return {"model": {}, **read_checkpoint_files(path, "cpu", keys), "path": path}
        return read_sharded(path, weights=self.info.is_main)

    def _load_weights(self, loaded: dict[str, Any]) -> None:
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, loaded["model"], options=options)
        optim = get_optimizer_state_dict(self.model, self.optimizer)  # the current sharding
        if "optim" in loaded:  # whole, keyed by position: by parameter name, each rank its part
            whole = by_name(loaded["optim"], optim)
            full = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(self.model, self.optimizer, whole, options=full)
            return
        load_shards(optim, loaded["path"])
        set_optimizer_state_dict(self.model, self.optimizer, optim)

    # --- saving ----------------------------------------------------------------------------
    def _save(
        self, name: str, step: int, *, background: bool = False, **metrics: float | None
    ) -> Path:
        """Write checkpoint `name` after step `step`: every rank its shard, the main rank the
        whole weights and the rest, renamed into place once all are written. With `background`
        each rank returns once its host copies are taken (after the previous write)."""
        self.wait()  # one write at a time, on every rank
        model_state = get_model_state_dict(self.model, options=_FULL)  # whole on the main rank
        optim = get_optimizer_state_dict(self.model, self.optimizer)
        if self._staged is None:
            self._staged = _create_cpu_state_dict(optim)
        staged = _copy_state_dict(optim, self._staged)  # a host copy training may go on from
        extra = None
        if self.info.is_main:
            extra = (self._train_state(step, metrics), rng_state())
        tmp = temp_dir(self.root, name, self._pid)
        if self.info.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            shards_dir(tmp).mkdir(parents=True)
        dist.barrier(group=self._group)  # the temporary directory exists for every rank
        job = (name, tmp, model_state, staged, extra)
        if background:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="leviathan-dcp")
            self._pending = self._writer.submit(self._write_sharded, *job)
        else:
            self._write_sharded(*job)
        return self.root / name

    def _write_sharded(
        self,
        name: str,
        tmp: Path,
        model_state: dict[str, torch.Tensor],
        optim: dict[str, Any],
        extra: tuple[dict[str, Any], dict[str, Any]] | None,
    ) -> Path:
        """Every rank: its optimizer shard; then the main rank: weights, RNG, state, manifest,
        the rename and pruning. Every rank returns once the checkpoint is in place (or failed)."""
        final = self.root / name
        failed: BaseException | None = None
        try:
            save_shards(optim, tmp, self._group)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the rendezvous
            failed = exc
        dist.barrier(group=self._group)  # every shard written (or failed)
        if self.info.is_main and failed is None:
            try:
                assert extra is not None
                self._publish(tmp, final, model_state, extra)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                failed = exc
        ok = torch.tensor([float(failed is None)])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=self._group)  # in place, or not
        if failed is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise failed
        if not bool(ok.item()):
            raise RuntimeError(f"{final}: another rank failed to write its part; not written")
        return final

    def _publish(
        self,
        tmp: Path,
        final: Path,
        model_state: dict[str, torch.Tensor],
        extra: tuple[dict[str, Any], dict[str, Any]],
    ) -> None:
        state, rng = extra
        manifest = self._manifest_at(int(state["step"]))
        publish(tmp, final, model_state, rng, state, manifest, files=sharded_files(tmp))
        prune(self.root, self.config.keep_last, keep=final)

    def _train_state(self, step: int, metrics: dict[str, float | None]) -> dict[str, Any]:
        return {**super()._train_state(step, metrics), OPTIM_FORMAT: SHARDED_FORMAT}

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._staged = None

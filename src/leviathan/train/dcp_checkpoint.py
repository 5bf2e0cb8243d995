"""Distributed checkpoints of an FSDP run (docs/method.md §4; `leviathan.train.fsdp`): the
optimizer state written sharded, each rank its own part (`torch.distributed.checkpoint`), the
weights whole, so a run resumes on another number of ranks and every downstream reader
(evaluation, export, the audit) reads the checkpoint as it reads a DDP run's.

A checkpoint directory holds what `checkpoint.py` describes, except that `optim.pt` is
`optim/`: DCP's `.metadata` and one `__<rank>_0.distcp` per rank, AdamW's moments with their
global shapes, keyed by parameter name (`get_optimizer_state_dict`). `model.safetensors` is
the whole fp32 weights, gathered to the main rank (`get_model_state_dict(full_state_dict,
cpu_offload)`: one all-gather of the parameters, the traffic of one forward), so the weights
are consolidated once, at every save, and never need converting: a third of the state (4 of
12 bytes per parameter) is written by one rank, the rest by all. `state.json` records
`optim_format: dcp` and the world size; the manifest hashes every file of `optim/` too, so the
integrity check before a restore covers the shards.

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
batches at every world size) and the main rank's RNG states, as a DDP run.

Either mode resumes the other's checkpoints, so a run moves between any numbers of ranks, 1
included: a run that does not shard (one process, even with runtime.parallel=fsdp, or DDP)
reads an FSDP checkpoint's shards whole (`load_whole_optimizer`), and an FSDP run reads a
whole optimizer state (optim.pt) on every rank and keeps its part (`_by_name`).
"""

from __future__ import annotations

import os
import shutil
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch import nn
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from leviathan.io import publish_dir, write_json
from leviathan.layout import RNG, STATE, WEIGHTS
from leviathan.train import checkpoint as ckpt
from leviathan.train.integrity import file_hashes, read_checkpoint_files

OPTIM_DIR = "optim"
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def read_sharded(path: Path, weights: bool = True, device: str = "cpu") -> dict[str, Any]:
    """What a sharded checkpoint holds besides its optimizer shards: the train state, the RNG
    states and (`weights`) the whole weights; {} as the weights otherwise (a rank that gets
    them by broadcast)."""
    keys = ("model", "rng", "state") if weights else ("rng", "state")
    return {"model": {}, **read_checkpoint_files(path, device, keys), "path": path}


def load_whole_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Read the optimizer shards of sharded checkpoint `path` whole, into the optimizer of a
    model that is not sharded (one process, or DDP's every rank): DCP gathers each state
    tensor from the shards that hold its parts."""
    optim = get_optimizer_state_dict(model, optimizer)  # keyed by parameter name, as saved
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load({"optim": optim}, checkpoint_id=str(path / OPTIM_DIR), no_dist=True)
    set_optimizer_state_dict(model, optimizer, optim)


def _by_name(whole: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A whole optimizer state as `Optimizer.state_dict()` keys it (each parameter by its
    position over the groups) keyed as `current` (`get_optimizer_state_dict`) keys the same
    optimizer's: by parameter name, the groups' parameters in the same order."""
    names = [name for group in current["param_groups"] for name in group["params"]]
    state = {names[i]: value for i, value in whole["state"].items()}
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in whole["param_groups"]]
    return {"state": state, "param_groups": groups}


def shard_files(directory: Path) -> list[str]:
    """The files of a checkpoint's sharded optimizer state, relative to the checkpoint."""
    root = directory / OPTIM_DIR
    return sorted(str(p.relative_to(directory)) for p in root.rglob("*") if p.is_file())


class ShardedCheckpointManager(ckpt.CheckpointManager):
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
        if not ckpt.is_sharded_checkpoint(path):
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
            whole = _by_name(loaded["optim"], optim)
            full = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(self.model, self.optimizer, whole, options=full)
            return
        dcp.load({"optim": optim}, checkpoint_id=str(loaded["path"] / OPTIM_DIR))
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
            extra = (self._train_state(step, metrics), ckpt.rng_state())
        tmp = self.root / f".{name}.{self._pid}.tmp"
        if self.info.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / OPTIM_DIR).mkdir(parents=True)
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
            dcp.save(
                {"optim": optim}, checkpoint_id=str(tmp / OPTIM_DIR), process_group=self._group
            )
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
        save_file({k: v.contiguous() for k, v in model_state.items()}, tmp / WEIGHTS)
        torch.save(rng, tmp / RNG)
        write_json(tmp / STATE, state)
        if self.manifest is not None:
            ckpt._write_manifest(tmp, final, state, self.manifest, files=self._files(tmp))
        publish_dir(tmp, final)
        ckpt.prune(self.root, self.config.keep_last, keep=final)

    @staticmethod
    def _files(tmp: Path) -> dict[str, str]:
        return file_hashes(tmp, [RNG, STATE, *shard_files(tmp)])

    def _train_state(self, step: int, metrics: dict[str, float | None]) -> dict[str, Any]:
        return {**super()._train_state(step, metrics), "optim_format": ckpt.SHARDED_FORMAT}

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._staged = None

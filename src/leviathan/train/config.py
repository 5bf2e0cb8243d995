"""Training configuration of one cell (docs/method.md §4): every recipe value is a field.

`TrainConfig` holds what determines the run (hashed: resuming with a different value is
refused), and the memory knob `micro_batch` (recorded, not hashed: gradient accumulation
computes the same step in another summation order, so a run continues across a change of it);
`RuntimeConfig` holds how it runs here (device, compile, logging cadence), which may change
between a run and its resumption.

Paper recipe: AdamW (0.9, 0.999), eps 1e-8, no weight decay; linear warm-up then cosine
decay to 10% of the peak; clip 1.0. What depends on the size (context, batch, token budget,
peak learning rate) is the scale's (`leviathan.scales`). The paper gives no warm-up: RECON,
1% of the steps, at least 100 steps where the run is long enough.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from leviathan.model.config import ModelConfig, model_config
from leviathan.model.kernel_use import CHECK_MODES
from leviathan.provenance import config_sha256
from leviathan.scales import get_scale
from leviathan.train.schedule import keep_steps
from leviathan.values import coerce

# More tokens than any run trains (60 times the 15T of the largest published ones): a budget
# above it is a slip of the exponent (`1e30`), refused before steps and schedules are sized by it
MAX_TOTAL_TOKENS = 10**15
# Fields recorded with a run but left out of its fingerprint: how the step is computed, not
# what it computes (micro_batch: the same optimizer step, split into more or fewer
# forward/backward passes; the gradients agree up to the summation order).
NOT_IDENTITY = ("micro_batch",)
# Fields no recipe block (config.train, a tag) sets: the cell's own identity
TRAIN_IDENTITY = ("scale", "vocab", "variant", "seed", "variant_name")


@dataclass(frozen=True)
class TrainConfig:
    scale: str
    vocab: str
    variant: str
    seed: int = 0
    # the scale's recipe (leviathan.scales.RECIPE_FIELDS): no defaults here, a scale sets them
    context: int = field(kw_only=True)
    global_batch: int = field(kw_only=True)  # sequences per optimizer step, over all ranks
    # sequences per forward/backward on one device: memory, not identity (NOT_IDENTITY)
    micro_batch: int = field(kw_only=True)
    total_tokens: int = field(kw_only=True)
    lr: float = field(kw_only=True)
    min_lr_ratio: float = 0.1  # cosine decays to this fraction of the peak
    warmup_steps: int | None = None  # None: 1% of the steps, at least min(100, steps // 10)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    vocab_size: int | None = None  # model V; None: the tokenizer's n_vocab
    model_overrides: dict[str, Any] = field(default_factory=dict)
    # the cell's name in its study where it is not `variant` itself: a named variant (`lev_h4`)
    # or a tagged cell (`leviathan@lr1e-3`) of the workflow config (leviathan.study.sweep)
    variant_name: str | None = None

    @property
    def cell_variant(self) -> str:
        """The variant as the cell's study names it (its directory, its table rows)."""
        return self.variant_name or self.variant

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.context

    @property
    def max_steps(self) -> int:
        return max(1, math.ceil(self.total_tokens / self.tokens_per_step))

    @property
    def warmup(self) -> int:
        if self.warmup_steps is not None:
            return self.warmup_steps
        return max(min(100, self.max_steps // 10), self.max_steps // 100)

    def model_config(self) -> ModelConfig:
        """The model a training config trains (its scale preset, the context, its overrides)."""
        overrides = {"max_seq_len": self.context, **self.model_overrides}
        return model_config(
            self.scale, self.vocab, self.variant, vocab_size=self.vocab_size, overrides=overrides
        )

    def validate(self, world_size: int = 1) -> TrainConfig:
        for name in ("context", "global_batch", "micro_batch", "total_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"train.{name}={value!r} must be a positive integer")
        if self.total_tokens > MAX_TOTAL_TOKENS:
            raise ValueError(
                f"train.total_tokens={self.total_tokens:.3g} is more than {MAX_TOTAL_TOKENS:.0e} "
                "tokens, beyond any training run: give the run's token budget (the scale's is "
                f"{get_scale(self.scale).total_tokens:.3g})"
            )
        if not self.lr > 0:
            raise ValueError(f"train.lr={self.lr} must be > 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"train.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.max_steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} must be in [0, max_steps={self.max_steps}]"
            )
        per_rank, rem = divmod(self.global_batch, world_size)
        if rem:
            raise ValueError(
                f"train.global_batch={self.global_batch} is not divisible by the "
                f"{world_size} ranks: use a multiple of {world_size}"
            )
        if per_rank % self.micro_batch:
            raise ValueError(
                f"train.micro_batch={self.micro_batch} does not divide the per-rank batch "
                f"{per_rank} (= global_batch {self.global_batch} / {world_size} ranks): "
                "choose a divisor of it"
            )
        if self.grad_clip < 0:
            raise ValueError(f"train.grad_clip={self.grad_clip} must be >= 0 (0 disables)")
        self._check_optimizer()
        self._check_context()
        return self

    def _check_optimizer(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"train.eps={self.eps} must be > 0 (the paper's: 1e-8)")
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(
                f"train.betas={list(self.betas)} must each be in [0, 1) (the paper's: [0.9, 0.999])"
            )
        if self.weight_decay < 0:
            raise ValueError(f"train.weight_decay={self.weight_decay} must be >= 0")

    def _check_context(self) -> None:
        """`context` within the model's max_seq_len: the scale's context unless
        model_overrides sets max_seq_len (a longer sequence is a step that cannot end soon)."""
        limit = self.model_overrides.get("max_seq_len", get_scale(self.scale).context)
        if isinstance(limit, int) and self.context > limit:
            raise ValueError(
                f"train.context={self.context} exceeds the model's max_seq_len {limit} (scale "
                f"{self.scale}): use at most {limit}, or raise model_overrides.max_seq_len"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "train config") -> TrainConfig:
        """From values as written (checked against the fields' types: `lr: 3e-4` is a float,
        `lr: fast` a one-line error naming `where`)."""
        return cls(**coerce(cls, d, where))

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the config without its NOT_IDENTITY fields: what
        a resume must match, and what names the run (a change of micro_batch continues it)."""
        return config_sha256({k: v for k, v in self.to_dict().items() if k not in NOT_IDENTITY})

    def with_(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class CheckpointConfig:
    """How a run's checkpoints are written and kept (`runtime.checkpoint`; the checkpoint
    manager, leviathan.train.checkpoint, takes it whole)."""

    every: int = 100  # steps between checkpoints (and at the end); 0: only the final one
    keep_last: int = 2  # step checkpoints kept besides `final`
    # written by a background thread from a host copy taken at the step, while training goes on
    # (the next save waits for the previous one); False: written in line
    background: bool = True
    # remove the step checkpoints once `final` is written (they only serve resuming)
    drop_steps_at_final: bool = False
    # steps whose weights are kept for good in checkpoints/kept/ (no optimizer state; never
    # pruned, nor dropped at final): leviathan.train.schedule.keep_steps, e.g. log2:512:1000
    keep_at: str = ""

    def __post_init__(self) -> None:
        _check_minima(self, "checkpoint")
        keep_steps(self.keep_at, 1)  # a malformed schedule is refused here


@dataclass(frozen=True)
class ValidationConfig:
    """The run's periodic validation loss (`runtime.validation`; the trainer's validator,
    leviathan.train.validation, takes it whole)."""

    every: int = 100  # steps between validation passes (and at the end); 0: only at the end
    windows: int = 64  # fixed validation windows per pass; 0: all
    batch: int = 16  # validation sequences per batch

    def __post_init__(self) -> None:
        _check_minima(self, "validation")


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases (`runtime.wandb`; train/wandb_log.py, pip install 'leviathan[wandb]'):
    the metrics, configs and provenance in one W&B run per run directory, continued on resume."""

    enabled: bool = False
    project: str = "leviathan"
    entity: str | None = None
    mode: str | None = None  # online | offline | disabled; None: W&B's ($WANDB_MODE)

    def __post_init__(self) -> None:
        if self.mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"runtime wandb.mode={self.mode!r}: use online, offline or disabled")


@dataclass(frozen=True)
class RuntimeConfig:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compile: bool = False  # compile each transformer block (leviathan.train.regions)
    bf16: bool = True  # bf16 autocast on CUDA (never on CPU)
    log_every: int = 1  # steps between metric lines
    # a readable progress line on stderr (the job's log in the workflow) every this many
    # steps and/or seconds (0: not by that measure), and at the first and the last step
    log_line_every: int = 0
    log_line_s: float = 60.0
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    prefetch: int = 2  # training batches read ahead in background threads (0: none)
    progress: bool = True  # progress bar on stderr
    tensorboard: bool = False
    dvclive: bool = (
        False  # live curves through DVCLive in <run_dir>/dvclive/ (pip install 'leviathan[live]')
    )
    wandb: WandbConfig = field(default_factory=WandbConfig)
    threads: int | None = (
        None  # torch CPU threads (None: torch's default; 0: all this process's CPUs)
    )
    # torch.use_deterministic_algorithms(True) (and cuBLAS's fixed workspace): every
    # variant's step bitwise reproducible on CUDA too, at some cost (bench/gpu_check.py)
    deterministic: bool = False
    # Checkpoints of a different config or data: refuse (False), or move them aside to
    # checkpoints.stale-<n>/ and start afresh (True; the workflow's choice, since Snakemake
    # only reruns a finished cell when its config or inputs changed).
    restart_on_mismatch: bool = False
    # Run-start check of the shards: "sampled" (size + sampled fingerprint on every rank, in
    # milliseconds) or "full" (also the whole sha256, on the main rank before it joins the
    # process group: ~80 s per 100 GB at 1.3 GB/s, which the other ranks wait out in the
    # rendezvous, so dist_timeout_s must cover it).
    verify_shards: str = "sampled"
    dist_timeout_s: int = 1800  # the process group's collective and rendezvous timeout
    # how several ranks share the model: ddp (a whole copy each) or fsdp (FSDP2: parameters,
    # gradients and AdamW's moments sharded, checkpoints distributed; leviathan.train.fsdp)
    parallel: str = "ddp"
    # recompute each block's activations in backward instead of keeping them (fsdp and ddp)
    activation_checkpointing: bool = False
    # before the first step each fused kernel the run launches is checked against the plain
    # torch path on its device (leviathan.model.kernel_check): a kernel that fails is not
    # used, with a WARNING ("warn"), or stops the run ("error")
    kernel_check: str = "warn"

    def __post_init__(self) -> None:
        """Every value's range, checked where it is read: a ValueError naming the key and what
        it may be. `threads=0` becomes this process's CPU count."""
        _check_minima(self, "runtime")
        if self.parallel not in ("ddp", "fsdp"):
            raise ValueError(f"runtime parallel={self.parallel!r}: use ddp or fsdp")
        if self.verify_shards not in ("sampled", "full"):
            raise ValueError(f"runtime verify_shards={self.verify_shards!r}: use sampled or full")
        if self.kernel_check not in CHECK_MODES:
            raise ValueError(
                f"runtime kernel_check={self.kernel_check!r}: use {' or '.join(CHECK_MODES)}"
            )
        if not _DEVICE.fullmatch(self.device):
            raise ValueError(
                f"runtime device={self.device!r} is not a device: use auto, cpu, cuda, cuda:N or mps"
            )
        if self.threads == 0:
            # here, not at the top: the workflow's parse reads this module, and data.encode
            # imports the tokenizers
            from leviathan.data.encode import usable_cpus

            object.__setattr__(self, "threads", usable_cpus())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "runtime") -> RuntimeConfig:
        """From values as written, checked against the fields' types (see TrainConfig) and
        their ranges; errors name `where`. A block (`checkpoint`, `validation`, `wandb`) is a
        mapping of its own keys, or its keys dotted (`checkpoint.every`: `--runtime`'s form),
        and goes whole to the component that reads it."""
        values = cls.coerce(d, where)
        try:
            blocks = {name: _BLOCKS[name](**values.pop(name, {})) for name in _BLOCKS}
            return cls(**values, **blocks)
        except ValueError as exc:  # "runtime KEY=..." from the checks: `where` names the block
            raise ValueError(f"{where}: {str(exc).removeprefix('runtime ')}") from None

    @classmethod
    def coerce(cls, d: Mapping[str, Any], where: str = "runtime") -> dict[str, Any]:
        """The values given, converted to their fields' types (ranges unchecked), each block's
        as a mapping of its own (dotted keys gathered); an unknown key is refused in one line
        naming the valid ones."""
        values: dict[str, Any] = {}
        blocks: dict[str, dict[str, Any]] = {}
        for key, value in d.items():
            name, dotted, sub = key.partition(".")
            if name not in _BLOCKS:
                values[key] = value
            elif dotted:
                blocks.setdefault(name, {})[sub] = value
            elif isinstance(value, Mapping) or value is None:  # None: a block left empty
                blocks.setdefault(name, {}).update(value or {})
            else:
                raise ValueError(
                    f"{where}: {name}={value!r}: {name} is a block of its own keys "
                    f"({', '.join(f.name for f in fields(_BLOCKS[name]))}): write "
                    f"{name}: {{KEY: VALUE}} (or --runtime {name}.KEY=VALUE)"
                )
        if "keep_at" in blocks.get("checkpoint", {}):
            blocks["checkpoint"]["keep_at"] = _steps_text(blocks["checkpoint"]["keep_at"])
        out = coerce(cls, values, where)
        for name, block in blocks.items():
            out[name] = coerce(_BLOCKS[name], block, where, prefix=f"{name}.")
        return out


def _steps_text(keep: Any) -> Any:
    """`keep_at` written as a list of steps (as YAML writes one) or as one step: the schedule's
    text form (`1,2,3`); anything else as it is."""
    if isinstance(keep, bool) or not isinstance(keep, (list, tuple, int)):
        return keep
    return ",".join(str(s) for s in (keep if isinstance(keep, (list, tuple)) else [keep]))


# The runtime's blocks: each a config of its own that one component takes whole
_BLOCKS: dict[str, type] = {
    "checkpoint": CheckpointConfig,
    "validation": ValidationConfig,
    "wandb": WandbConfig,
}


# Numeric keys: the least value each may take, and what it counts (block, key)
_MINIMA: dict[tuple[str, str], tuple[int, str]] = {
    ("runtime", "log_every"): (1, "steps between metric lines"),
    ("runtime", "log_line_every"): (0, "steps between progress lines; 0: not by steps"),
    ("runtime", "log_line_s"): (0, "seconds between progress lines; 0: not by time"),
    ("validation", "every"): (0, "steps between validation passes; 0: only at the end"),
    ("validation", "windows"): (0, "validation windows per pass; 0: all"),
    ("validation", "batch"): (1, "validation sequences per batch"),
    ("checkpoint", "every"): (0, "steps between checkpoints; 0: only the final one"),
    ("checkpoint", "keep_last"): (1, "step checkpoints kept; the newest is the one a resume needs"),
    ("runtime", "prefetch"): (0, "batches read ahead; 0: none"),
    ("runtime", "threads"): (0, "torch CPU threads; 0: all CPUs; null: torch's default"),
    ("runtime", "dist_timeout_s"): (1, "seconds"),
}
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def _check_minima(config: Any, block: str) -> None:
    """A ValueError naming the key (`block.key` inside a block) and its least value."""
    for (owner, key), (low, meaning) in _MINIMA.items():
        value = getattr(config, key) if owner == block else None
        if value is not None and value < low:
            name = key if block == "runtime" else f"{block}.{key}"
            raise ValueError(f"runtime {name}={value!r} must be >= {low} ({meaning})")


# How the workflow runs training where config.runtime is silent (the one home of these
# choices; the schema carries no runtime defaults): no progress bars in job logs, and a cell
# whose config or data changed restarts, since Snakemake reruns a finished cell only then.
WORKFLOW_RUNTIME: dict[str, Any] = {"progress": False, "restart_on_mismatch": True}


def workflow_runtime(config_runtime: Mapping[str, Any] | None) -> RuntimeConfig:
    """The runtime of a workflow training job: RuntimeConfig's defaults, the workflow's
    choices (WORKFLOW_RUNTIME), then config.runtime. Built and checked once per process for a
    given config.runtime (the workflow asks for it per job: the plan, each job's arguments)."""
    return _workflow_runtime(json.dumps(config_runtime or {}, sort_keys=True, default=str))


@functools.lru_cache(maxsize=16)
def _workflow_runtime(config_runtime_json: str) -> RuntimeConfig:
    given = json.loads(config_runtime_json)
    values = {**WORKFLOW_RUNTIME, **{k: v for k, v in given.items() if v is not None}}
    return RuntimeConfig.from_dict(values, "config runtime")


def train_config(
    scale: str, vocab: str, variant: str, where: str = "train config", **overrides: Any
) -> TrainConfig:
    """The cell's training config: the scale's recipe (`leviathan.scales`), then overrides
    (`where` names their source in errors)."""
    values = {**get_scale(scale).recipe(), **overrides}
    return TrainConfig.from_dict(
        {"scale": scale, "vocab": vocab, "variant": variant, **values}, where
    )

"""A trained checkpoint, loaded for evaluation.

`open_checkpoint(path)` accepts a run directory (its `checkpoints/final/`), a `checkpoints/`
directory or one checkpoint directory, checks every file against the checkpoint's manifest (as
a resume does: a damaged or unrecorded checkpoint is refused), rebuilds the model from the
config recorded in its `state.json` and loads the safetensors weights. `EvalModel` wraps the
loaded model for evaluation: the input table is materialised once (for LEV and the MLP
variants the generator runs once over all V ids, never per batch) and used as a plain
embedding, so evaluation costs exactly what serving a standard model costs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from torch.overrides import TorchFunctionMode

from leviathan.checkpoint.files import (
    CHECKPOINTS,
    FINAL,
    STATE,
    WEIGHTS,
    final_dir,
    is_complete,
    state_file,
    step_dir,
    weights_file,
)
from leviathan.checkpoint.integrity import DamagedCheckpoint, manifest_file, verify_checkpoint
from leviathan.device import resolve_device
from leviathan.eval.errors import EvalInputError
from leviathan.io import read_json, sha256_file
from leviathan.manifest import display_path
from leviathan.model import LanguageModel, ModelConfig, build_model
from leviathan.model.generated import validate_ids
from leviathan.model.loss import DEFAULT_CHUNK_ELEMS, token_losses, token_losses_and_greedy
from leviathan.model.variants import TableInput
from leviathan.values import flatten
from leviathan.vocab import VocabSpec, check_covers, get_vocab

# what to do about a checkpoint file that cannot be read
DAMAGED_FIX = (
    "the checkpoint is damaged; rerun its run's training, which sets a damaged checkpoint "
    "aside and writes it again from an older one"
)


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory meant by `path` (a run dir means its final checkpoint)."""
    p = Path(path)
    final = f"{CHECKPOINTS}/{FINAL}/"
    for candidate in (p, p / FINAL, final_dir(p)):
        if is_complete(candidate):
            return candidate
    if (p / CHECKPOINTS).is_dir() or p.name == CHECKPOINTS:
        raise EvalInputError(
            f"{p}: the run has no complete final checkpoint ({final} with {STATE} "
            f"and {WEIGHTS}); finish training (rerun `leviathan train`, it resumes) or pass a "
            f"step checkpoint directory such as {step_dir(CHECKPOINTS, 100)} explicitly"
        )
    raise FileNotFoundError(
        f"{p}: not a checkpoint: expected a run directory with {final} or a "
        f"checkpoint directory holding {STATE} and {WEIGHTS}"
    )


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint is (its files, hash, configs); weights are loaded by `load_model`."""

    path: Path
    sha256: str  # of model.safetensors
    state: dict[str, Any]
    model_config: ModelConfig
    manifest: dict[str, Any] | None = None  # model.safetensors.json, its files verified

    @property
    def trained_on(self) -> dict[str, str]:
        """The training shards its manifest records: sha256 -> path."""
        inputs = (self.manifest or {}).get("inputs") or []
        return {
            str(i["sha256"]): str(i.get("path"))
            for i in inputs
            if i.get("role") == "train_tokens" and i.get("sha256")
        }

    @property
    def train_config(self) -> dict[str, Any]:
        return dict(self.state.get("train_config") or {})

    @property
    def vocab(self) -> VocabSpec:
        name = self.train_config.get("vocab")
        if not name:
            raise EvalInputError(
                f"{state_file(self.path)}: has no train_config.vocab; not a trainer checkpoint"
            )
        return get_vocab(name)

    @property
    def context(self) -> int:
        return int(self.train_config.get("context") or self.model_config.max_seq_len)

    def record(self) -> dict[str, Any]:
        """The checkpoint's identity as recorded in every evaluation output."""
        tc = self.train_config
        loader = self.state.get("loader") or {}
        manifest = manifest_file(self.path)
        has_manifest = manifest.is_file()
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            # the checkpoint's own manifest (model.safetensors.json): the next link of the
            # chain (training data, train config); None for checkpoints written without one
            "manifest": display_path(manifest) if has_manifest else None,
            "manifest_sha256": sha256_file(manifest) if has_manifest else None,
            "state_sha256": sha256_file(state_file(self.path)),
            "step": self.state.get("step"),
            "tokens": self.state.get("tokens"),
            "scale": tc.get("scale"),
            "vocab": self.vocab.name,
            "variant": self.model_config.variant,
            # the cell's name in its study (a named variant or a tagged cell; else the variant)
            "cell_variant": tc.get("variant_name") or self.model_config.variant,
            "seed": tc.get("seed"),
            "context": self.context,
            "train_fingerprint": self.state.get("train_fingerprint"),
            "train_data": loader.get("fingerprint"),
            "model_config": self.model_config.to_dict(),
            "code": self.state.get("code"),
        }

    def check_vocab(self, vocab: str | None, what: str) -> None:
        """Refuse data of another vocabulary than the one the model was trained on."""
        if vocab is None:
            return
        theirs = get_vocab(vocab).name
        if theirs != self.vocab.name:
            raise EvalInputError(
                f"{what} is tokenized with {theirs}, but the checkpoint {self.path} was trained "
                f"on {self.vocab.name}: use the {self.vocab.name} data (or a checkpoint of "
                f"the {theirs} cell)"
            )

    def check_bpe(self, vocab_record: dict[str, Any] | None, what: str) -> None:
        """Refuse data whose BPE file hash differs from the training data's."""
        fp = (self.state.get("loader") or {}).get("fingerprint") or {}
        ours, theirs = fp.get("vocab_bpe_sha256"), (vocab_record or {}).get("bpe_sha256")
        if ours and theirs and ours != theirs:
            raise EvalInputError(
                f"{what} was tokenized with a BPE file of sha256 {theirs}, but the checkpoint "
                f"{self.path} was trained on data made with {ours}: retokenize with the same "
                "vocabulary file"
            )


def verified_manifest(ckpt_dir: Path) -> dict[str, Any]:
    """The manifest of a checkpoint whose every file hashes as it records (the check a resume
    makes, leviathan.checkpoint.integrity); a checkpoint without one, or with a file missing or
    changed, is refused in one line naming the file."""
    try:
        verify_checkpoint(ckpt_dir)
    except DamagedCheckpoint as exc:
        raise EvalInputError(
            f"{exc}: the checkpoint is not as training wrote it, so nothing it computes can be "
            "traced; rerun the training command, which sets a damaged checkpoint aside and "
            "resumes from the newest intact one"
        ) from None
    manifest: dict[str, Any] = read_json(manifest_file(ckpt_dir))
    return manifest


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint's state after checking every file against its manifest (no weights
    loaded)."""
    ckpt_dir = resolve_checkpoint(path)
    manifest = verified_manifest(ckpt_dir)
    try:
        state = read_json(state_file(ckpt_dir))
    except ValueError as exc:
        raise EvalInputError(
            f"{state_file(ckpt_dir)}: not valid JSON ({exc}): {DAMAGED_FIX}"
        ) from None
    if "model_config" not in state:
        raise EvalInputError(
            f"{state_file(ckpt_dir)}: has no model_config; not a trainer checkpoint"
        )
    cfg = ModelConfig.from_dict(state["model_config"]).validate()
    _check_overrides(ckpt_dir, cfg, (state.get("train_config") or {}).get("model_overrides"))
    ckpt = Checkpoint(ckpt_dir, str(manifest["artifact"]["sha256"]), state, cfg, manifest)
    check_covers(
        cfg.vocab_size,
        ckpt.vocab.name,
        fix=f"the model config of {ckpt_dir} and its training vocabulary disagree",
        error=EvalInputError,
    )
    return ckpt


def _check_overrides(ckpt_dir: Path, cfg: ModelConfig, overrides: dict[str, Any] | None) -> None:
    """Refuse a checkpoint whose model config contradicts what its training config set
    explicitly (e.g. lev.basis, a RECON choice with no weights of its own), naming the key."""
    recorded = flatten(cfg.to_dict())
    for key, value in flatten(overrides or {}).items():
        if key in recorded and recorded[key] != value:
            raise EvalInputError(
                f"{state_file(ckpt_dir)}: its model_config has {key}={recorded[key]!r} but its "
                f"training config set {key}={value!r}: the checkpoint's records disagree; "
                "evaluate a checkpoint as `leviathan train` wrote it"
            )


# parameters that exist only under one value of a LEV RECON choice (docs/method.md §6)
_CHOICE_WEIGHTS = {"head_proj.bias": "lev.seed_bias", "knot_scale": "lev.knot_scale"}


def _choice_hint(exc: RuntimeError, cfg: ModelConfig) -> str:
    """The LEV choice a weights/config disagreement points at, or ''."""
    keys = sorted({key for name, key in _CHOICE_WEIGHTS.items() if name in str(exc)})
    lev = cfg.lev
    now = {"lev.seed_bias": lev.seed_bias, "lev.knot_scale": lev.knot_scale}
    return "".join(
        f" The weights were trained with another {key} than its model_config's {now[key]!r}."
        for key in keys
    )


class _EmptyOnMeta(TorchFunctionMode):
    """`torch.empty` without a device allocates on the meta device: every large parameter of
    the model (nn.Linear, nn.Embedding, the tables and spline tensors are created by it) is a
    shape only, while the small computed buffers (RoPE tables, digit offsets) stay real."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if func is torch.empty and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def load_model(ckpt: Checkpoint, device: str | torch.device = "cpu") -> LanguageModel:
    """The trained LanguageModel of `ckpt` (eval mode, no gradients).

    The weights are read once, straight onto `device`, and become the model's parameters
    (`assign=True`): the model is built without storage for them, so peak memory is one copy
    of the weights (4.8 GB at 1.2b), not an initialised model plus the loaded file."""
    dev = resolve_device(device)
    with _EmptyOnMeta():
        model = build_model(ckpt.model_config, "cpu")
    try:
        weights = load_file(weights_file(ckpt.path), device=str(dev))
    except Exception as exc:  # noqa: BLE001 - safetensors' own error, or the OS's
        raise EvalInputError(
            f"{weights_file(ckpt.path)}: unreadable ({exc}): {DAMAGED_FIX}"
        ) from None
    try:
        model.load_state_dict(weights, assign=True)
    except RuntimeError as exc:
        raise EvalInputError(
            f"{weights_file(ckpt.path)}: weights do not fit the model its {STATE} describes "
            f"(variant {ckpt.model_config.variant}): {exc}.{_choice_hint(exc, ckpt.model_config)}"
        ) from exc
    del weights
    model.to(dev)  # the small computed buffers; the weights are there already
    unset = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if unset:
        raise EvalInputError(
            f"{weights_file(ckpt.path)}: holds no values for {unset[:3]}: the checkpoint is "
            "incomplete; evaluate a checkpoint written by `leviathan train`"
        )
    model.eval().requires_grad_(False)
    return model


def _amp_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    if precision not in ("auto", "fp32", "bf16"):
        raise EvalInputError(f"precision={precision!r}: use auto, fp32 or bf16")
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    return torch.bfloat16


class EvalModel(nn.Module):
    """A trained model prepared for evaluation: one materialised V x D input table.

    hidden(ids) = backbone(table[ids]); the output head is the variant's V x D matrix.
    Table variants use their own weight (no copy); generated inputs (LEV, MLPs) are
    evaluated once for all ids here. bf16 autocast on CUDA ("auto"), fp32 elsewhere;
    logits and losses are always fp32. At most `chunk_elems` logits are held at once (the loss's
    tiles on a CPU, its chunks under the GPU rule: `leviathan.model.loss`).
    """

    def __init__(
        self, model: LanguageModel, precision: str = "auto", chunk_elems: int | None = None
    ) -> None:
        super().__init__()
        self.cfg = model.cfg
        self.backbone = model.backbone
        io = model.io
        with torch.no_grad():
            table = io.input.weight if isinstance(io.input, TableInput) else io.input_table()
        self.register_buffer("input_table", table.detach(), persistent=False)
        self.register_buffer("output_weight", io.output_weight.detach(), persistent=False)
        self.eval().requires_grad_(False)
        self.amp_dtype = _amp_dtype(self.device, precision)
        self.chunk_elems = chunk_elems or DEFAULT_CHUNK_ELEMS

    @property
    def device(self) -> torch.device:
        return self.input_table.device

    @property
    def vocab_size(self) -> int:
        return int(self.input_table.shape[0])

    @property
    def max_seq_len(self) -> int:
        return int(self.cfg.max_seq_len)

    @property
    def precision(self) -> str:
        return "fp32" if self.amp_dtype is None else "bf16-autocast"

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        if self.amp_dtype is None:
            yield
        else:
            with torch.autocast(self.device.type, dtype=self.amp_dtype):
                yield

    @torch.inference_mode()
    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> final hidden states [B, T, D] (dtype of the autocast)."""
        validate_ids(ids, self.vocab_size)
        with self._autocast():
            return self.backbone(F.embedding(ids, self.input_table))

    @torch.inference_mode()
    def token_losses(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-token cross-entropy [B, T] in fp32 (0 where the target is -100)."""
        h = self.hidden(ids).flatten(0, 1)
        with self._autocast():
            out = token_losses(h, self.output_weight, targets.flatten(), self.chunk_elems)
        return out.view_as(targets)

    @torch.inference_mode()
    def target_scores(
        self, hidden: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Of targets [N] after hidden states [N, D]: the loss (fp32 [N]) and whether each
        target is the argmax (bool [N]), through the chunked loss's own logits."""
        with self._autocast():
            return token_losses_and_greedy(hidden, self.output_weight, targets, self.chunk_elems)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits of hidden states [..., D] (callers keep the row count bounded)."""
        with self._autocast():
            return (hidden @ self.output_weight.t()).float()


def open_checkpoint(
    path: str | Path,
    device: str | torch.device = "auto",
    precision: str = "auto",
    kernel_check: str = "warn",
) -> tuple[Checkpoint, EvalModel]:
    """Read, hash and load a checkpoint; return it with its EvalModel. Before the EvalModel
    runs anything, the fused kernels it may launch are checked on its device
    (`leviathan.model.kernel_check.self_check`; `kernel_check`: warn or error, as
    runtime.kernel_check): a kernel that fails is not used, or stops the evaluation."""
    from leviathan.model.kernel_check import self_check

    ckpt = read_checkpoint(path)
    model = load_model(ckpt, device)
    dev = next(model.parameters()).device
    self_check(model, dev, bf16=_amp_dtype(dev, precision) is not None, mode=kernel_check)
    return ckpt, EvalModel(model, precision)

"""`export_run`: a trained run -> a directory `transformers` loads with no custom code.

    OUT/config.json                LlamaConfig
    OUT/generation_config.json     EOT as BOS/EOS
    OUT/model.safetensors          Llama weights (the V x D input table materialised)
    OUT/tokenizer.json, tokenizer_config.json, special_tokens_map.json (as transformers writes them)
    OUT/README.md                  model card: cell, checkpoint sha256, config, code version
    OUT/model.safetensors.json     manifest (kind "hf_export"): every file's sha256, the
                                   checkpoint it came from (the provenance chain), the BPE file

Everything is written into a temporary sibling directory and renamed into place whole, so
OUT is either absent, the old export (with `force`), or complete; the temporary copy a killed
export left is removed by the next export to OUT, and a full disk is one line (`DiskFull`). `force` replaces only an
earlier export (its manifest's kind says so), never a run or any other folder.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import transformers
from transformers.utils import SAFE_WEIGHTS_NAME

from leviathan.checkpoint.files import state_file, weights_file
from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import Checkpoint, load_model, read_checkpoint
from leviathan.export.card import model_card
from leviathan.export.hf import check_dtype, to_llama
from leviathan.export.tokenizer import hf_tokenizer
from leviathan.io import (
    disk_full,
    no_space,
    publish_dir,
    read_json,
    remove_dead_temps,
    sha256_file,
)
from leviathan.layout import MODEL_CARD, manifest_path
from leviathan.manifest import display_path, input_record, vocab_record, write_manifest
from leviathan.provenance import utc_now

ARTIFACT_TYPE = "hf_export"
log = logging.getLogger(__name__)


class ExportError(ValueError):
    """An export's input or output location is unusable; the message says how to fix it."""


@dataclass(frozen=True)
class ExportResult:
    out: Path
    manifest: dict[str, Any]


def check_out(out: Path, force: bool, source: Path) -> None:
    """Refuse to replace a non-empty OUT unless `force`, and then only an earlier export (its
    manifest says so: never a run, a checkpoint or anything else); a file is never replaced,
    nor a folder that holds or lies inside `source`, the run exported."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a directory; choose another OUT")
    a, b = out.resolve(), source.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise ExportError(f"{out}: overlaps the run exported, {source}; choose another OUT")
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not force:
        raise ExportError(
            f"{out}: exists and is not empty; pass --force to replace it, or choose another OUT"
        )
    if not _is_export(out):
        raise ExportError(
            f"{out}: is not an export (no {manifest_path(SAFE_WEIGHTS_NAME)} of kind {ARTIFACT_TYPE!r} "
            "in it): --force replaces only an earlier `leviathan export`; choose another OUT"
        )


def _is_export(directory: Path) -> bool:
    try:
        manifest = read_json(manifest_path(directory / SAFE_WEIGHTS_NAME))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") == ARTIFACT_TYPE


def export_run(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    dtype: str = "float32",
    force: bool = False,
) -> ExportResult:
    """Export the final checkpoint of `run_dir` (or a checkpoint directory) to `out`."""
    started = utc_now()
    check_dtype(dtype)
    final = Path(out)
    check_out(final, force, Path(run_dir))
    try:
        ckpt = read_checkpoint(run_dir)
    except FileNotFoundError as exc:
        raise ExportError(str(exc)) from exc
    tok = load_tokenizer(ckpt.vocab.name)
    llama = to_llama(load_model(ckpt, "cpu"), tok.spec, dtype)
    hf_tok = hf_tokenizer(tok, ckpt.context)
    record = ckpt.record()
    vocab = vocab_record(tok.spec, sha256_file(tok.bpe_path))

    final.parent.mkdir(parents=True, exist_ok=True)
    for leftover in remove_dead_temps(final):  # a killed export's copy: never published
        log.warning("%s: removed the temporary copy a killed export left", leftover)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        llama.save_pretrained(tmp, safe_serialization=True)
        hf_tok.save_pretrained(tmp)
        (tmp / MODEL_CARD).write_text(model_card(record, vocab, dtype, display_path(final)))
        manifest = _write_export_manifest(tmp, final, ckpt, record, vocab, dtype, started)
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()
        publish_dir(tmp, final)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # the space it took, before measuring
        needed = sum(t.numel() * t.element_size() for t in llama.state_dict().values())
        if no_space(exc, final.parent, needed):
            fix = "free space there (or export to another OUT), then rerun the export"
            raise disk_full(final, needed, fix) from exc
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(final, manifest)


def _write_export_manifest(
    tmp: Path,
    final: Path,
    ckpt: Checkpoint,
    record: dict[str, Any],
    vocab: dict[str, Any],
    dtype: str,
    started: datetime,
) -> dict[str, Any]:
    """The manifest of the export written in `tmp` (to be published as `final`): every file's
    sha256 (the weights' as the artifact's own), the checkpoint's weights, state and manifest
    as inputs (`record`: `ckpt.record()`), the BPE file, the dtype."""
    files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.name != SAFE_WEIGHTS_NAME}
    inputs = [
        input_record(weights_file(ckpt.path), ckpt.sha256, role="checkpoint"),
        input_record(state_file(ckpt.path), record["state_sha256"], role="checkpoint_state"),
    ]
    if record["manifest"]:
        inputs.append(
            input_record(record["manifest"], record["manifest_sha256"], role="checkpoint_manifest")
        )
    return write_manifest(
        tmp / SAFE_WEIGHTS_NAME,
        artifact_type=ARTIFACT_TYPE,
        recorded_path=final / SAFE_WEIGHTS_NAME,
        inputs=inputs,
        vocab=vocab,
        config={"dtype": dtype, "format": "transformers LlamaForCausalLM"},
        started=started,
        device="cpu",
        fields={
            "export_dir": display_path(final),
            "files": files,
            "checkpoint": record,
            "transformers": _transformers_version(),
        },
    )


def _transformers_version() -> str:
    return str(transformers.__version__)

"""WikiText-103 zero-shot perplexity through Hugging Face `datasets`.

The test split (`Salesforce/wikitext`, config `wikitext-103-raw-v1`, one row per line of the
raw file; blank lines are empty rows) is turned back into the raw text: rows concatenated,
an empty row standing for its blank line ("\\n"). The text is tokenized with the model's
vocabulary, preceded by one EOT token as the only context of the first token, and scored
with windows of the training context moved by `stride` (default: the context, disjoint
windows; a smaller stride gives each token more context). Reported: token-level loss and
perplexity, word-level perplexity exp(total nats / words) with words as in
`leviathan.eval.words` (ASCII-whitespace separated, tokenizer-independent), and bits per
byte. The dataset id, config, split and a local-files override (`data_files`, any format
`datasets` reads: parquet, json, csv, text) are config.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from typing import Any

import numpy as np

from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import Checkpoint, EvalModel
from leviathan.eval.config import WikitextConfig, infer_builder, normalise_data_files
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.hub import is_connection_error, require_hub
from leviathan.eval.perplexity import LN2, check_finite_loss, score_stream
from leviathan.eval.results import envelope, perplexity
from leviathan.io import sha256_file
from leviathan.provenance import utc_now


def load_texts(cfg: WikitextConfig) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """Rows of the configured split, a description of the source, and input file records."""
    import datasets

    inputs: list[dict[str, Any]] = []
    if cfg.data_files:
        files = normalise_data_files(cfg.data_files, "wikitext")
        if cfg.split not in files:
            raise EvalInputError(
                f"wikitext.data_files has split(s) {sorted(files)} but wikitext.split={cfg.split!r}: "
                f"name the file of the {cfg.split!r} split"
            )
        builder = infer_builder(files, cfg.builder, "wikitext")
        ds = datasets.load_dataset(builder, data_files={cfg.split: files[cfg.split]}, split=cfg.split)
        source = {"kind": "local", "builder": builder, "split": cfg.split, "data_files": files[cfg.split]}
        inputs = [{"role": "wikitext", "path": f, "sha256": sha256_file(f)} for f in files[cfg.split]]
    else:
        fix = ("Download it where the Hub is reachable (e.g. the parquet files of "
               f"{cfg.dataset}/{cfg.name}) and set wikitext.data_files to {{{cfg.split}: <file>}}")  # fmt: skip
        require_hub(f"WikiText ({cfg.dataset}, {cfg.name}, split {cfg.split})", fix)
        try:
            ds = datasets.load_dataset(cfg.dataset, cfg.name, split=cfg.split, revision=cfg.revision)
        except Exception as exc:
            if is_connection_error(exc):
                raise HubUnreachable(f"WikiText ({cfg.dataset}, {cfg.name}) could not be loaded from the "
                                     f"Hugging Face Hub or the local cache: {exc}. {fix}") from exc  # fmt: skip
            raise
        source = {"kind": "hub", "dataset": cfg.dataset, "name": cfg.name, "split": cfg.split,
                  "revision": cfg.revision}  # fmt: skip
    if cfg.text_column not in ds.column_names:
        raise EvalInputError(
            f"wikitext: the dataset has columns {ds.column_names}, no {cfg.text_column!r}: set "
            "wikitext.text_column or use files in the official schema (one `text` column)"
        )
    texts = list(ds[cfg.text_column])
    source.update({"rows": len(texts), "fingerprint": getattr(ds, "_fingerprint", None)})
    return texts, source, inputs


def raw_text(rows: list[str]) -> str:
    """The raw file text from its rows (empty rows are blank lines)."""
    return "".join(r if r else "\n" for r in rows)


def score_text(model: EvalModel, vocab: str, text: str, *, context: int, stride: int, batch_size: int) -> dict[str, Any]:
    """Token/word/byte-level perplexity of one text (preceded by EOT)."""
    tok = load_tokenizer(vocab)
    ids = np.asarray([tok.spec.eot_id, *tok.encode(text)], dtype=np.int64)
    if ids.size < 2:
        raise EvalInputError("wikitext: the text is empty")
    t0 = time.perf_counter()
    losses = score_stream(model, ids, context=context, stride=stride, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    total = float(losses.astype(np.float64).sum())
    raw = text.encode("utf-8")
    n_tokens, n_words, n_bytes = int(losses.size), len(raw.split()), len(raw)
    loss = total / n_tokens
    return {
        "tokens": n_tokens,
        "words": n_words,
        "bytes": n_bytes,
        "total_nats": total,
        "loss": loss,
        "token_perplexity": perplexity(loss),
        "word_perplexity": perplexity(total / n_words) if n_words else None,
        "bits_per_byte": total / LN2 / n_bytes,
        "byte_perplexity": perplexity(total / n_bytes),
        "text_sha256": hashlib.sha256(raw).hexdigest(),
        "seconds": round(seconds, 3),
        "tokens_per_s": n_tokens / seconds if seconds > 0 else None,
    }


def evaluate_wikitext(ckpt: Checkpoint, model: EvalModel, cfg: WikitextConfig = WikitextConfig(),
                      started: _dt.datetime | None = None) -> dict[str, Any]:  # fmt: skip
    """The `wikitext` evaluation output of a checkpoint (see `leviathan.eval.results`).

    `started`: when the evaluation began, checkpoint loading included (default: now)."""
    started = started or utc_now()
    t0 = time.perf_counter()
    context = cfg.context or ckpt.context
    stride = cfg.stride or context
    if context > model.max_seq_len:
        raise EvalInputError(f"wikitext.context={context} exceeds the model's max_seq_len={model.max_seq_len}")
    rows, source, inputs = load_texts(cfg)
    result = score_text(model, ckpt.vocab.name, raw_text(rows), context=context, stride=stride,
                        batch_size=cfg.batch_size)  # fmt: skip
    result["source"] = source
    config = {**cfg.__dict__, "context": context, "stride": stride, "precision": model.precision}
    check_finite_loss(result["loss"], ckpt)
    return envelope("wikitext", checkpoint=ckpt, inputs=inputs, config=config, results=result,
                    seconds=time.perf_counter() - t0, device=str(model.device), started=started)  # fmt: skip

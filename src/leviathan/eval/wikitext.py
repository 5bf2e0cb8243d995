"""WikiText-103 zero-shot perplexity by lm-evaluation-harness's own `wikitext` task.

The number is lm-eval's: its `wikitext` task definition (document-level text, one `page` per
article; its `wikitext_detokenizer` as the scored target; `loglikelihood_rolling` over windows
of the model's length with the EOT token as the prefix of the first one; `word_perplexity`
with words counted on the page before detokenization, `byte_perplexity`, `bits_per_byte`),
run by lm-eval's `simple_evaluate` through our model (leviathan.eval.lm_eval_adapter). Only
the dataset changes: lm-eval's task reads `EleutherAI/wikitext_document_level` with the
WikiText-2 config; the paper's figure is WikiText-103 (`wikitext-103-raw-v1`, the same
dataset's other config). `data_files` points it at local files in that schema instead of the
Hub (any format `datasets` reads).

A secondary figure, named as such, is token-level: the pages concatenated as they
are (no detokenizer), preceded by one EOT token, scored in windows of `context` moved by
`stride` (default: disjoint) - token-level loss and perplexity (`stream`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from typing import Any

import numpy as np

from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import Checkpoint, EvalModel
from leviathan.eval.config import LmEvalConfig, LocalTaskData, WikitextConfig
from leviathan.eval.errors import EvalInputError
from leviathan.eval.lm_eval_tasks import TaskRun, evaluate_tasks, lm_eval_version, write_samples
from leviathan.eval.perplexity import check_context, check_finite_loss, score_stream
from leviathan.eval.results import envelope, perplexity
from leviathan.provenance import utc_now

TASK = "wikitext"  # lm-eval's task name (its YAML: lm_eval/tasks/wikitext/wikitext.yaml)
METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")


def task_overrides(cfg: WikitextConfig) -> dict[str, dict[str, Any]]:
    """What changes in lm-eval's `wikitext` config: the dataset (WikiText-103) and its split."""
    change: dict[str, Any] = {
        "dataset_path": cfg.dataset,
        "dataset_name": cfg.name,
        "test_split": cfg.split,
    }
    if cfg.revision:
        change["dataset_kwargs"] = {"revision": cfg.revision}
    return {TASK: change}


def lm_eval_config(cfg: WikitextConfig, context: int) -> LmEvalConfig:
    data = {TASK: LocalTaskData(cfg.data_files, cfg.builder)} if cfg.data_files else {}
    return LmEvalConfig(
        tasks=(TASK,),
        data=data,
        num_fewshot=0,
        batch_size=cfg.batch_size,
        max_length=context,
        bootstrap_iters=0,
    )


def score_stream_text(
    model: EvalModel, vocab: str, text: str, *, context: int, stride: int, batch_size: int
) -> dict[str, Any]:
    """The secondary stream figure: token-level perplexity of one text (preceded by EOT)."""
    tok = load_tokenizer(vocab)
    ids = np.asarray([tok.spec.eot_id, *tok.encode(text)], dtype=np.int64)
    if ids.size < 2:
        raise EvalInputError("wikitext: the text is empty")
    losses = score_stream(model, ids, context=context, stride=stride, batch_size=batch_size)
    total = float(losses.astype(np.float64).sum())
    loss = total / int(losses.size)
    return {
        "tokens": int(losses.size),
        "total_nats": total,
        "loss": loss,
        "token_perplexity": perplexity(loss),
        "context": context,
        "stride": stride,
        "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def evaluate_wikitext(
    ckpt: Checkpoint,
    model: EvalModel,
    cfg: WikitextConfig = WikitextConfig(),
    started: _dt.datetime | None = None,
    samples_out: str | None = None,
    cache: str | None = None,
) -> dict[str, Any]:
    """The `wikitext` evaluation output of a checkpoint (see `leviathan.eval.results`).

    results: word_perplexity, byte_perplexity, bits_per_byte (lm-eval's), `lm_eval` (its
    version, task hash, document count, data source and task config) and `stream` (the
    secondary token-level figure; `token_perplexity` repeats it at the top level).
    `started`: when the evaluation began, checkpoint loading included (default: now).
    `cache`: lm-eval's request cache (leviathan.eval.lm_eval_tasks.evaluate_tasks); the
    secondary stream figure is recomputed (WikiText-103's test split is ~0.3M tokens)."""
    started = started or utc_now()
    t0 = time.perf_counter()
    context = cfg.context or ckpt.context
    stride = cfg.stride or context
    check_context(context, model, "wikitext.context")
    if stride > context:
        raise EvalInputError(f"wikitext.stride={stride} must be <= wikitext.context={context}")
    run = _run_wikitext_task(ckpt, model, cfg, context, cache)
    task = run.per_task[TASK]
    docs = sorted(run.samples.get(TASK, []), key=lambda s: s["doc_id"])
    pages = [d["doc"]["page"] for d in docs]
    if not pages:
        raise EvalInputError("wikitext: the split has no documents")
    t1 = time.perf_counter()
    stream = score_stream_text(
        model,
        ckpt.vocab.name,
        "".join(pages),
        context=context,
        stride=stride,
        batch_size=cfg.batch_size,
    )
    stream["seconds"] = round(time.perf_counter() - t1, 3)
    result: dict[str, Any] = {m: task["metrics"].get(f"{m},none") for m in METRICS}
    result["token_perplexity"] = stream["token_perplexity"]  # the stream figure (secondary)
    result["documents"] = len(pages)
    result["lm_eval"] = _lm_eval_record(task)
    result["stream"] = stream
    if samples_out is not None:
        result["samples"] = write_samples(run.samples, samples_out)
    check_finite_loss(stream["loss"], ckpt)
    config = {**cfg.__dict__, "context": context, "stride": stride, "precision": model.precision}
    return envelope(
        "wikitext",
        checkpoint=ckpt,
        inputs=run.inputs,
        config=config,
        results=result,
        seconds=time.perf_counter() - t0,
        device=str(model.device),
        started=started,
    )


def _run_wikitext_task(
    ckpt: Checkpoint, model: EvalModel, cfg: WikitextConfig, context: int, cache: str | None
) -> TaskRun:
    """lm-eval's `wikitext` task on WikiText-103, with errors that name the config key."""
    fix = (
        "Fetch it where the Hub is reachable with the data step (`snakemake all_data`, into "
        f"data/eval/), or download {cfg.dataset} ({cfg.name}) and set wikitext.data_files to "
        f"{{{cfg.split}: <file>}} (one `page` per article, the dataset's own schema)"
    )
    try:
        return evaluate_tasks(
            ckpt, model, lm_eval_config(cfg, context), task_overrides(cfg), hub_fix=fix, cache=cache
        )
    except KeyError as exc:
        if exc.args != ("page",):
            raise
        raise EvalInputError(
            "wikitext: the data has no `page` column: lm-eval's wikitext task reads the "
            f"document-level schema of {cfg.dataset} (one `page` per article)"
        ) from exc


def _lm_eval_record(task: dict[str, Any]) -> dict[str, Any]:
    """What the output keeps of lm-eval's run of the task."""
    return {
        "version": lm_eval_version(),
        "task": TASK,
        "task_version": task["version"],
        "task_hash": task["task_hash"],
        "n_samples": task["n_samples"],
        "data": task["data"],
        "config": task["config"],
    }

"""lm-evaluation-harness model `leviathan`: our checkpoints behind lm-eval's `TemplateLM`.

    lm = LeviathanLM(pretrained="results/runs/.../seed0", device="cuda", batch_size=32)
    lm_eval.simple_evaluate(model=lm, tasks=[...])
    # or, once this module is imported: simple_evaluate(model="leviathan",
    #     model_args="pretrained=results/runs/...,batch_size=32", tasks=[...])
    # or lm-eval's own CLI: leviathan-lm-eval --model leviathan --model_args pretrained=RUN ...

`pretrained` names a run directory or a checkpoint directory (`checkpoint` is an alias), as
HF models are named in lm-eval. The model is the checkpoint's `EvalModel` (input table
materialised once: no LEV recomputation per request) with the checkpoint's tiktoken
vocabulary; an empty context, or one that is only whitespace (which encodes to no tokens once
lm-eval moves its trailing spaces into the continuation), is the EOT token, as lm-eval's HF
model does with its prefix token. `batch_size=auto` is refused (this model does not probe
memory): give an integer. Requests are sorted longest first and run in batches of
`batch_size` right-padded sequences (causal attention: padding after a position cannot
affect it); only the continuation positions are scored, through the chunked loss every
evaluation uses (`leviathan.model.loss.token_losses_and_greedy`). Inputs longer than
`max_length` (default: the training context) keep their last `max_length` tokens, as
lm-eval's HF model does. `loglikelihood_rolling` uses lm-eval's own
rolling windows; `generate_until` decodes greedily (no sampling) until a stop string, EOT
or `max_gen_toks`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from leviathan.data.tokenizers import Tokenizer, load_tokenizer
from leviathan.eval.checkpoint import Checkpoint, EvalModel, open_checkpoint
from leviathan.eval.errors import EvalInputError


def _int(value: Any, name: str, default: int | None) -> int | None:
    if value is None or value == "":
        return default
    if str(value).startswith("auto"):
        raise EvalInputError(
            f"leviathan model arg {name}={value!r}: `auto` is not supported (this model does not "
            f"probe device memory); give an integer, e.g. {name}=32"
        )
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise EvalInputError(f"leviathan model arg {name}={value!r} must be an integer") from None
    if out < 1:
        raise EvalInputError(f"leviathan model arg {name}={value!r} must be >= 1")
    return out


def lm_device(device: str | None) -> str:
    """The device lm-eval's HF model would use: the one asked for, except that a CUDA device
    this machine does not have (lm-eval's CLI passes `cuda:0` when `--device` is not given)
    means auto: the GPU if there is one, else the CPU, as HFLM falls back."""
    if not device or device == "auto":
        return "auto"
    if device.startswith("cuda:"):
        index = device.partition(":")[2]
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            warnings.warn(
                f"device {device!r} is not on this machine: using "
                + ("cuda" if torch.cuda.is_available() else "the CPU"),
                stacklevel=2,
            )
            return "auto"
    return device


def right_padded(rows: list[list[int]]) -> torch.Tensor:
    """Token lists as one int64 batch [len(rows), longest], padded on the right with 0: under
    causal attention the padding after a position cannot change that position's output."""
    x = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.int64)
    for i, r in enumerate(rows):
        x[i, : len(r)] = torch.as_tensor(r, dtype=torch.int64)
    return x


@register_model("leviathan")
class LeviathanLM(TemplateLM):  # type: ignore[misc]
    """A Leviathan-pipeline checkpoint as an lm-eval language model."""

    backend = "causal"

    def __init__(
        self,
        pretrained: str | Path | None = None,
        checkpoint: str | Path | None = None,
        device: str | None = "auto",
        batch_size: int | str | None = 16,
        max_length: int | str | None = None,
        max_gen_toks: int | str | None = 256,
        precision: str = "auto",
        loaded: tuple[Checkpoint, EvalModel] | None = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        if pretrained is not None and checkpoint is not None and str(pretrained) != str(checkpoint):
            raise EvalInputError(
                f"pretrained={pretrained} and checkpoint={checkpoint} disagree: give one "
                "(checkpoint is an alias of pretrained)"
            )
        path = pretrained if pretrained is not None else checkpoint
        if loaded is None:
            if path is None:
                raise EvalInputError(
                    "the leviathan lm-eval model needs pretrained=<run or checkpoint dir>"
                )
            loaded = open_checkpoint(path, lm_device(device), precision)
        self.ckpt, self.model = loaded
        self.tok: Tokenizer = load_tokenizer(self.ckpt.vocab.name)
        self.batch_size = _int(batch_size, "batch_size", 16) or 16
        self._max_length = _int(max_length, "max_length", self.ckpt.context) or self.ckpt.context
        if self._max_length > self.model.max_seq_len:
            raise EvalInputError(
                f"max_length={self._max_length} exceeds the model's max_seq_len={self.model.max_seq_len}"
            )
        self.max_gen_toks = _int(max_gen_toks, "max_gen_toks", 256) or 256
        self._device = self.model.device

    # -- what lm-eval asks of a TemplateLM -------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tok.spec.eot_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return self.tok.spec.name

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, **kwargs: Any
    ) -> list[int]:
        return self.tok.encode(string)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tok.decode(tokens)

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split of (context, continuation) into tokens; a context that encodes to no
        tokens (only whitespace, moved into the continuation) gets the prefix token, as an
        empty one does, so the first continuation token is scored after EOT, not elsewhere."""
        context_enc, continuation_enc = super()._encode_pair(context, continuation)
        if not context_enc:
            context_enc = [self.prefix_token_id]
        return context_enc, continuation_enc

    def get_model_info(self) -> dict[str, Any]:
        return {
            "leviathan_checkpoint": str(self.ckpt.path),
            "leviathan_checkpoint_sha256": self.ckpt.sha256,
            "leviathan_variant": self.ckpt.model_config.variant,
            "vocab": self.ckpt.vocab.name,
            "max_length": self.max_length,
            "precision": self.model.precision,
        }

    # -- scoring ---------------------------------------------------------------------------
    def _score_batch(self, seqs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(log p(continuation | context), is_greedy) of (context, continuation) token lists."""
        rows, positions, targets, owners = [], [], [], []
        for i, (ctx, cont) in enumerate(seqs):
            self._check_request(ctx, cont)
            inp = (ctx + cont)[-(self.max_length + 1) : -1]
            rows.append(inp)
            positions += [(i, p) for p in range(len(inp) - len(cont), len(inp))]
            targets += cont
            owners += [i] * len(cont)
        dev = self.model.device
        h = self.model.hidden(right_padded(rows).to(dev))
        pos = torch.as_tensor(positions, dtype=torch.int64, device=dev)
        tgt = torch.as_tensor(targets, dtype=torch.int64, device=dev)
        losses, greedy = self.model.target_scores(h[pos[:, 0], pos[:, 1]], tgt)
        # summed on the CPU, one token after the other: a float64 index_add_ on CUDA adds
        # in no fixed order (atomics), so the same request could score differently per run
        own = torch.as_tensor(owners, dtype=torch.int64)
        logp = (-losses).double().cpu()
        sums = torch.zeros(len(seqs), dtype=torch.float64).index_add_(0, own, logp)
        misses = torch.zeros(len(seqs), dtype=torch.int64).index_add_(
            0, own, (~greedy).long().cpu()
        )
        return [
            (float(s), bool(m == 0)) for s, m in zip(sums.tolist(), misses.tolist(), strict=True)
        ]

    def _check_request(self, ctx: list[int], cont: list[int]) -> None:
        if not cont:
            raise EvalInputError("lm-eval sent an empty continuation")
        if not ctx:
            raise EvalInputError(
                "a request with no context token (use the prefix token for an empty context)"
            )
        if len(cont) > self.max_length:
            raise EvalInputError(
                f"a continuation of {len(cont)} tokens exceeds max_length={self.max_length}"
            )

    def _loglikelihood_tokens(
        self,
        requests: list[tuple[Any, list[int], list[int]]],
        disable_tqdm: bool = False,
        **kwargs: Any,
    ) -> list[tuple[float, bool]]:
        order = sorted(
            range(len(requests)), key=lambda i: -(len(requests[i][1]) + len(requests[i][2]))
        )
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="leviathan loglikelihood")
        for b in range(0, len(order), self.batch_size):
            idx = order[b : b + self.batch_size]
            scored = self._score_batch([(requests[i][1], requests[i][2]) for i in idx])
            for i, res in zip(idx, scored, strict=True):
                out[i] = res
                key = requests[i][0]
                if key is not None:
                    self.cache_hook.add_partial("loglikelihood", key, res)
            bar.update(len(idx))
        bar.close()
        return [r for r in out if r is not None]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        windows: list[tuple[None, list[int], list[int]]] = []
        owner: list[int] = []
        for i, req in enumerate(requests):
            (string,) = req.args
            pairs = lm_utils.get_rolling_token_windows(
                token_list=self.tok_encode(string),
                prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length,
                context_len=1,
            )
            for ctx, cont in map(lm_utils.make_disjoint_window, pairs):
                windows.append((None, list(ctx), list(cont)))
                owner.append(i)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, scores, strict=True):
            totals[i] += logp
        for req, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return totals

    # -- generation ------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        out: list[str] = []
        todo = [(req.args[0], dict(req.args[1] or {})) for req in requests]
        for b in tqdm(
            range(0, len(todo), self.batch_size), disable=disable_tqdm, desc="leviathan generate"
        ):
            out += self._generate_batch(todo[b : b + self.batch_size])
        for req, text in zip(requests, out, strict=True):
            self.cache_hook.add_partial("generate_until", req.args, text)
        return out

    def _generate_batch(self, batch: list[tuple[str, dict[str, Any]]]) -> list[str]:
        stops, limits, seqs = [], [], []
        for context, kw in batch:
            if kw.get("do_sample") or float(kw.get("temperature", 0.0) or 0.0) > 0:
                raise EvalInputError(
                    "the leviathan lm-eval model generates greedily only: set do_sample=false"
                )
            until = kw.get("until") or []
            stops.append([until] if isinstance(until, str) else list(until))
            limits.append(
                _int(kw.get("max_gen_toks"), "max_gen_toks", self.max_gen_toks) or self.max_gen_toks
            )
            seqs.append(self.tok_encode(context) or [self.prefix_token_id])
        generated: list[list[int]] = [[] for _ in batch]
        done = [False] * len(batch)
        dev = self.model.device
        for _ in range(max(limits)):
            live = [i for i, d in enumerate(done) if not d]
            if not live:
                break
            rows = [(seqs[i] + generated[i])[-self.max_length :] for i in live]
            h = self.model.hidden(right_padded(rows).to(dev))
            last = torch.as_tensor([len(r) - 1 for r in rows], device=dev)
            nxt = (
                self.model.logits(h[torch.arange(len(rows), device=dev), last]).argmax(-1).tolist()
            )
            for i, t in zip(live, nxt, strict=True):
                if t == self.eot_token_id:
                    done[i] = True
                    continue
                generated[i].append(t)
                text = self.tok_decode(generated[i])
                if len(generated[i]) >= limits[i] or any(s and s in text for s in stops[i]):
                    done[i] = True
        texts = []
        for i in range(len(batch)):
            text = self.tok_decode(generated[i])
            for s in stops[i]:
                if s:
                    text = text.split(s)[0]
            texts.append(text)
        return texts

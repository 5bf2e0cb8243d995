"""Text from a trained cell: greedy decoding or sampling at a temperature (`leviathan generate`).

The model is the evaluation model (`EvalModel`: the input table materialised once, so LEV
runs once for all V ids, never per token). Each new token re-runs the backbone over the last
`max_seq_len` tokens (no key/value cache: O(T^2) per token, which is fine for looking at a
cell's samples; for fast generation export the cell and use `transformers`, whose `generate`
gives the same greedy tokens: a test holds the two equal).

Sampling: the next token is drawn from softmax(logits / temperature), restricted to the
`top_k` largest logits when given, with a seeded `torch.Generator`, so a seed gives the same
text on the same device. temperature = 0 is greedy (the argmax; the lowest id on a tie).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leviathan.eval.checkpoint import EvalModel


@dataclass(frozen=True)
class Sampling:
    """How each next token is chosen."""

    max_new_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None  # sample among the k most likely tokens only
    seed: int = 0
    stop_id: int | None = None  # end early once this id (the EOT token) is produced

    def check(self, context: int | None = None) -> Sampling:
        """Refuse values that cannot be meant; `context`: the model's, the most new tokens
        (beyond it a sample no longer sees its prompt, and each token re-runs the backbone
        over the whole context: 10^8 tokens would run for days without a word)."""
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: must be >= 1")
        if context is not None and self.max_new_tokens > context:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens}: more than the model's context of "
                f"{context} tokens (beyond it a sample no longer sees its prompt); ask for at "
                f"most {context}"
            )
        if not self.temperature >= 0:
            raise ValueError(f"temperature={self.temperature}: must be >= 0 (0 is greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k}: must be >= 1 (or omitted: the whole vocabulary)")
        return self


def next_token(
    logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None
) -> int:
    """The id chosen from fp32 logits [V] of the next position."""
    if sampling.temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits.double() / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < scaled.numel():
        kth = torch.topk(scaled, sampling.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.inference_mode()
def generate(model: EvalModel, prompt: list[int], sampling: Sampling) -> list[int]:
    """The new ids after `prompt` (at least one id), at most `sampling.max_new_tokens` (no
    more than the model's context)."""
    sampling.check(model.max_seq_len)
    if not prompt:
        raise ValueError("the prompt has no tokens: give some text (or start from the EOT token)")
    generator = torch.Generator(device="cpu").manual_seed(sampling.seed)
    ids = list(prompt)
    new: list[int] = []
    for _ in range(sampling.max_new_tokens):
        window = torch.tensor([ids[-model.max_seq_len :]], device=model.device)
        hidden = model.hidden(window)[0, -1]
        token = next_token(model.logits(hidden).cpu(), sampling, generator)
        ids.append(token)
        new.append(token)
        if token == sampling.stop_id:
            break
    return new

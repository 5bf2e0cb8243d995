"""A tiktoken vocabulary as a Hugging Face fast tokenizer, built offline.

The BPE ranks come from the file the data layer resolved and verified by sha256
(`leviathan.data.tokenizers.load_tokenizer`), the pre-tokenisation regex and special tokens
from the same `ENCODING_RULES` tiktoken is built with, so the HF tokenizer reproduces
tiktoken's ids:

* tiktoken merges by the rank of the merged token and takes a pre-token whole when it is
  in the vocabulary; a `tokenizers` BPE with the byte-level alphabet, one merge per
  (left, right) split of every token ordered by the merged token's rank, and
  `ignore_merges=True` does the same;
* special tokens keep tiktoken's ids (`<|endoftext|>` is also BOS and EOS, as in GPT-2);
  no special token is added on encode, and decoding does not clean up spaces, so
  decode(encode(text)) == text.

One difference is deliberate: tiktoken's `encode_ordinary` (what our data layer uses)
reads "<|endoftext|>" in text as plain characters; the HF tokenizer, like tiktoken's
`encode(..., allowed_special="all")`, maps it to the special token.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from leviathan.data.tokenizers import ENCODING_RULES, Tokenizer, parse_ranks

EOT_TEXT = "<|endoftext|>"


@cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE alphabet)."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _unicode(token: bytes) -> str:
    m = _byte_to_unicode()
    return "".join(m[b] for b in token)


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level vocabulary and merges of tiktoken ranks.

    Every split of a token into two tokens of the vocabulary is a merge; merges are ordered
    by the merged token's rank (ties by the parts' ranks), which is the order tiktoken
    applies them in."""
    vocab = {_unicode(tok): rank for tok, rank in ranks.items()}
    merges: list[tuple[int, int, int, str, str]] = []
    for tok, rank in ranks.items():
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            lr, rr = ranks.get(left), ranks.get(right)
            if lr is not None and rr is not None:
                merges.append((rank, lr, rr, _unicode(left), _unicode(right)))
    merges.sort()
    return vocab, [(a, b) for *_, a, b in merges]


def onig_pattern(pattern: str) -> str:
    """tiktoken's pattern in the Oniguruma dialect of `tokenizers`.

    Oniguruma reads `X{1,3}+` not as a possessive interval but as "(X{1,3}) one or more
    times" (cl100k's `\\p{N}{1,3}+` would take a whole digit run). Every such interval ends
    its alternative in tiktoken's patterns, so the greedy `X{1,3}` matches the same text."""
    return re.sub(r"(\{\d+(?:,\d*)?\})\+", r"\1", pattern)


def hf_tokenizer(tok: Tokenizer, max_length: int | None = None) -> Any:
    """`transformers.PreTrainedTokenizerFast` equal to the tiktoken encoding of `tok`
    (`max_length`: the model's context, recorded as the tokenizer's `model_max_length`)."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import PreTrainedTokenizerFast

    pattern, special = ENCODING_RULES[tok.spec.encoding]
    vocab, merges = vocab_and_merges(parse_ranks(tok.bpe_path))
    vocab.update(special)  # special tokens at tiktoken's ids
    bpe = models.BPE(
        vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False, byte_fallback=False
    )
    backend = HFTokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(onig_pattern(pattern)), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    others = [t for t in special if t != EOT_TEXT]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=EOT_TEXT,
        eos_token=EOT_TEXT,
        additional_special_tokens=others,
        clean_up_tokenization_spaces=False,
        add_bos_token=False,
        add_eos_token=False,
        **({"model_max_length": max_length} if max_length else {}),
    )

"""The UTF-8 bytes of every token id of a vocabulary (for bits per byte and word spans).

Special tokens (EOT between documents) stand for no text: they have no bytes. Ids that the
encoding leaves unused (o200k_base has gaps below its last special token) have none either.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from leviathan.data.tokenizers import load_tokenizer


@dataclass(frozen=True)
class TokenBytes:
    vocab: str
    pieces: tuple[bytes, ...]  # pieces[i]: the bytes of id i (b"" for special/unused ids)
    lengths: np.ndarray[Any, np.dtype[np.int64]]  # len(pieces[i])
    special: np.ndarray[Any, np.dtype[np.bool_]]  # True for special tokens (EOT, ...)
    eot_id: int

    def n_bytes(self, ids: np.ndarray[Any, Any]) -> int:
        """Total text bytes of a sequence of ids."""
        return int(self.lengths[np.asarray(ids, dtype=np.int64)].sum())


@functools.cache
def token_bytes(vocab: str) -> TokenBytes:
    tok = load_tokenizer(vocab)
    enc = tok.encoding
    special_ids = set(
        enc.special_tokens_set and [enc.encode_single_token(s) for s in enc.special_tokens_set]
    )
    n = tok.spec.n_vocab
    pieces: list[bytes] = []
    special = np.zeros(n, dtype=bool)
    for i in range(n):
        if i in special_ids:
            special[i] = True
            pieces.append(b"")
            continue
        try:
            pieces.append(enc.decode_single_token_bytes(i))
        except KeyError:  # an id the encoding does not use
            pieces.append(b"")
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=n)
    return TokenBytes(tok.spec.name, tuple(pieces), lengths, special, tok.spec.eot_id)

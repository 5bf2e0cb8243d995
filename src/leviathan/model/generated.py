"""Base class of the input variants that *generate* embeddings from the id (LEV, the MLPs).

A batch holds far fewer distinct ids than positions, so `forward` evaluates the generator
once per distinct id and gathers the rows back (unique + gather, never per position).
`materialize()` evaluates every id once, in bounded chunks, giving the V x D table that
evaluation and serving use like an ordinary embedding table.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def check_ids(lo: int, hi: int, vocab_size: int) -> None:
    """Raise a ValueError naming the offending id when [lo, hi] is not inside [0, V)."""
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"token id {bad} is outside [0, {vocab_size}): the data was tokenized with a "
            f"different vocabulary than the model's vocab_size={vocab_size}; retokenize or "
            "build the model for that vocabulary"
        )


class GeneratedInput(nn.Module):
    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings [N, D] of a flat vector of ids, one evaluation per entry."""
        raise NotImplementedError

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        uniq, inverse = torch.unique(ids, return_inverse=True)  # sorted: ends are min and max
        if uniq.numel():
            check_ids(int(uniq[0]), int(uniq[-1]), self.vocab_size)
        # F.embedding, not `rows[inverse]`: its backward sums the repeated rows in a fixed
        # order, while advanced indexing accumulates with atomics on CPU (not reproducible)
        return F.embedding(inverse, self.generate(uniq))

    def _table_like(self) -> torch.Tensor:
        p = next(self.parameters())
        return torch.empty(self.vocab_size, self.d_model, device=p.device, dtype=p.dtype)

    @torch.no_grad()
    def materialize(self, chunk: int = 8192) -> torch.Tensor:
        """The exact V x D table, computed `chunk` ids at a time (bounded memory)."""
        table = self._table_like()
        for start in range(0, self.vocab_size, chunk):
            stop = min(self.vocab_size, start + chunk)
            table[start:stop] = self.generate(torch.arange(start, stop, device=table.device))
        return table

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

MATERIALIZE_CHUNK = 8192  # ids per generator call in materialize() (bounds its memory)


def check_ids(lo: int, hi: int, vocab_size: int) -> None:
    """Raise a ValueError naming the offending id when [lo, hi] is not inside [0, V)."""
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"token id {bad} is outside [0, {vocab_size}): the data was tokenized with a "
            f"different vocabulary than the model's vocab_size={vocab_size}; retokenize or "
            "build the model for that vocabulary"
        )


def validate_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """A clear error for ids outside [0, V), without a host synchronisation.

    Ids are validated where data enters (the loader checks every batch on the host); this
    guards direct calls. On CPU in eager mode the ids are in host memory, so reading their
    range costs no device sync and the error names the offending id. On an accelerator, or
    while torch.compile traces, it is an asynchronous assert (a device-side assert on GPU):
    no sync, no graph break."""
    if ids.numel() == 0:
        return
    if ids.device.type == "cpu" and not torch.compiler.is_compiling():
        lo, hi = torch.aminmax(ids)
        check_ids(int(lo), int(hi), vocab_size)
    else:
        torch._assert_async(
            ((ids >= 0) & (ids < vocab_size)).all(),
            f"token id outside [0, {vocab_size}): the data was tokenized with a different "
            "vocabulary than the model's; retokenize or build the model for that vocabulary",
        )


class GeneratedInput(nn.Module):
    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings [N, D] of a flat vector of ids, one evaluation per entry."""
        raise NotImplementedError

    def generate_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """`generate(ids)` written into `out` [N, D] (materialize's rows of the table). A
        generator whose last op is a matmul overrides this to write there directly."""
        out.copy_(self.generate(ids))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        validate_ids(ids, self.vocab_size)
        # The one graph break (and, on GPU, the one host sync) of the training forward:
        # unique's output size depends on the data. Kept: evaluating LEV once per distinct
        # id is what keeps it cheap (docs/method.md §2).
        uniq, inverse = torch.unique(ids, return_inverse=True)
        # F.embedding, not `rows[inverse]`: its backward sums the repeated rows in a fixed
        # order, while advanced indexing accumulates with atomics on CPU (not reproducible)
        return F.embedding(inverse, self.generate(uniq))

    def _table_like(self) -> torch.Tensor:
        p = next(self.parameters())
        return torch.empty(self.vocab_size, self.d_model, device=p.device, dtype=p.dtype)

    @torch.no_grad()
    def materialize(self, chunk: int = MATERIALIZE_CHUNK) -> torch.Tensor:
        """The exact V x D table, computed `chunk` ids at a time (bounded memory)."""
        table = self._table_like()
        for start in range(0, self.vocab_size, chunk):
            stop = min(self.vocab_size, start + chunk)
            self.generate_into(torch.arange(start, stop, device=table.device), table[start:stop])
        return table

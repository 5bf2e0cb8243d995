"""The six input/output variants of docs/method.md §3, behind one small interface.

A variant owns two things: `input` (ids -> embeddings [..., D]) and the output head
(`output_weight`, a [V, D] matrix: logits = hidden @ output_weight.T). All share the same
backbone. Variants register by name in `VARIANTS`; the model config chooses one.

| name         | input                                                | output head         |
|--------------|------------------------------------------------------|---------------------|
| tied         | V x D table                                          | the same table      |
| untied       | V x D table                                          | separate V x D      |
| albert       | V x e table, then e x D projection                   | separate V x D      |
| flat_mlp     | fixed +-1 binary code of the id -> 2-layer SiLU MLP  | separate V x D      |
| factored_mlp | LEV digits + codebooks -> 2-layer SiLU MLP           | separate V x D      |
| leviathan    | LEV                                                  | separate V x D      |

Parameter matching (RECON, documented): the ablation compares input representations at a
matched budget, so albert's inner width e and the MLP hidden width H of flat_mlp and
factored_mlp default to the value whose input-side parameter count is closest to LEV's at
the same D and V (`matched_width`; each class states its count as `width`).
`ModelConfig.mlp_hidden` overrides e / H.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from leviathan.model.config import VARIANT_NAMES, ModelConfig
from leviathan.model.generated import GeneratedInput, validate_ids
from leviathan.model.lev import LEV, DigitCodebooks


class TableInput(nn.Module):
    """An ordinary V x D embedding table."""

    def __init__(self, vocab_size: int, d_model: int, std: float) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, 0.0, std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        validate_ids(ids, self.vocab_size)
        return F.embedding(ids, self.weight)

    @torch.no_grad()
    def materialize(self) -> torch.Tensor:
        return self.weight.detach().clone()


def lev_parameter_count(cfg: ModelConfig) -> int:
    """P_LEV at this config's V and D, counted from the LEV module itself (meta device)."""
    with torch.device("meta"):
        lev = LEV(cfg.vocab_size, cfg.d_model, cfg.lev_base, cfg.lev)
    return sum(p.numel() for p in lev.parameters())


def matched_width(cfg: ModelConfig, fixed: int, per_width: int) -> int:
    """`mlp_hidden` if set, else the width w whose count fixed + per_width w is closest to
    P_LEV (an input's parameters: fixed ones plus per_width for each unit of its width)."""
    if cfg.mlp_hidden is not None:
        return cfg.mlp_hidden
    return max(1, round((lev_parameter_count(cfg) - fixed) / per_width))


class FactorizedTableInput(nn.Module):
    """ALBERT: V x e table followed by an e x D projection."""

    @staticmethod
    def width(cfg: ModelConfig) -> int:
        """e matched to LEV: V e + e D ~ P_LEV, so e = round(P_LEV / (V + D))."""
        return matched_width(cfg, 0, cfg.vocab_size + cfg.d_model)

    def __init__(self, vocab_size: int, d_model: int, inner: int, std: float) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.table = nn.Parameter(torch.empty(vocab_size, inner))
        self.proj = nn.Linear(inner, d_model, bias=False)
        nn.init.normal_(self.table, 0.0, std)
        nn.init.normal_(self.proj.weight, 0.0, 1.0 / math.sqrt(inner))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        validate_ids(ids, self.vocab_size)
        return self.proj(F.embedding(ids, self.table))

    @torch.no_grad()
    def materialize(self) -> torch.Tensor:
        return self.proj(self.table)


class SiLUMLP(nn.Sequential):
    """Two-layer SiLU MLP with biases (RECON): in -> H -> D."""

    def __init__(self, d_in: int, hidden: int, d_out: int, std: float) -> None:
        super().__init__(nn.Linear(d_in, hidden), nn.SiLU(), nn.Linear(hidden, d_out))
        nn.init.normal_(self[0].weight, 0.0, 1.0 / math.sqrt(d_in))
        nn.init.zeros_(self[0].bias)
        nn.init.normal_(self[2].weight, 0.0, std)
        nn.init.zeros_(self[2].bias)


def n_bits(vocab_size: int) -> int:
    return max(1, math.ceil(math.log2(vocab_size)))


class BinaryCodeMLP(GeneratedInput):
    """flat_mlp: the id's binary digits as a fixed +-1 code (RECON) -> SiLU MLP -> D."""

    @staticmethod
    def width(cfg: ModelConfig) -> int:
        """H matched to LEV: (n_bits + 1) H + (H + 1) D ~ P_LEV."""
        return matched_width(cfg, cfg.d_model, n_bits(cfg.vocab_size) + 1 + cfg.d_model)

    def __init__(self, vocab_size: int, d_model: int, hidden: int, std: float) -> None:
        super().__init__(vocab_size, d_model)
        self.register_buffer("bit_weights", 2 ** torch.arange(n_bits(vocab_size)), persistent=False)
        self.mlp = SiLUMLP(len(self.bit_weights), hidden, d_model, std)

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        bits = torch.bitwise_and(ids.unsqueeze(-1), self.bit_weights).ne(0)
        dtype = self.mlp[0].weight.dtype
        return self.mlp(bits.to(dtype) * 2 - 1)


class CodebookMLP(GeneratedInput):
    """factored_mlp: LEV steps 1-2 (digits + codebooks), then a SiLU MLP -> D, no splines."""

    @staticmethod
    def width(cfg: ModelConfig) -> int:
        """H matched to LEV: k b d_seed + (d_seed + 1) H + (H + 1) D ~ P_LEV."""
        lev, D = cfg.lev, cfg.d_model
        return matched_width(cfg, lev.n_digits * cfg.lev_base * lev.d_seed + D, lev.d_seed + 1 + D)

    def __init__(
        self, vocab_size: int, d_model: int, base: int, cfg: ModelConfig, hidden: int
    ) -> None:
        super().__init__(vocab_size, d_model)
        lev = cfg.lev
        self.codebooks = DigitCodebooks(base, lev.n_digits, lev.d_seed)
        nn.init.normal_(self.codebooks.table.weight, 0.0, lev.init_std)
        self.mlp = SiLUMLP(lev.d_seed, hidden, d_model, cfg.init_std)

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        z = self.codebooks(ids)
        # z's scale is lev.init_std * sqrt(k); normalise it so the MLP sees unit inputs.
        return self.mlp(F.layer_norm(z, z.shape[-1:]))


class InputOutput(nn.Module):
    """One variant: `input` maps ids to embeddings; `output_weight` [V, D] scores tokens."""

    def __init__(self, name: str, input: nn.Module, head: nn.Linear | None) -> None:
        super().__init__()
        self.name = name
        self.input = input
        self.head = head  # None: tied to the input table

    @property
    def output_weight(self) -> torch.Tensor:
        return self.input.weight if self.head is None else self.head.weight

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.input(ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.output_weight)

    def input_table(self) -> torch.Tensor:
        """The V x D input table (materialised for generated inputs) for eval and serving."""
        return self.input.materialize()


def _head(cfg: ModelConfig) -> nn.Linear:
    head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
    nn.init.normal_(head.weight, 0.0, cfg.init_std)
    return head


VARIANTS: dict[str, Callable[[ModelConfig], InputOutput]] = {
    "tied": lambda c: InputOutput("tied", TableInput(c.vocab_size, c.d_model, c.init_std), None),
    "untied": lambda c: InputOutput(
        "untied", TableInput(c.vocab_size, c.d_model, c.init_std), _head(c)
    ),
    "albert": lambda c: InputOutput(
        "albert",
        FactorizedTableInput(c.vocab_size, c.d_model, FactorizedTableInput.width(c), c.init_std),
        _head(c),
    ),
    "flat_mlp": lambda c: InputOutput(
        "flat_mlp",
        BinaryCodeMLP(c.vocab_size, c.d_model, BinaryCodeMLP.width(c), c.init_std),
        _head(c),
    ),
    "factored_mlp": lambda c: InputOutput(
        "factored_mlp",
        CodebookMLP(c.vocab_size, c.d_model, c.lev_base, c, CodebookMLP.width(c)),
        _head(c),
    ),
    "leviathan": lambda c: InputOutput(
        "leviathan", LEV(c.vocab_size, c.d_model, c.lev_base, c.lev), _head(c)
    ),
}


if tuple(VARIANTS) != VARIANT_NAMES:  # one list of names: the config's, checked without torch
    raise ImportError(f"VARIANTS {tuple(VARIANTS)} differ from model.config.VARIANT_NAMES")


def build_variant(cfg: ModelConfig) -> InputOutput:
    cfg.validate()
    return VARIANTS[cfg.variant](cfg)

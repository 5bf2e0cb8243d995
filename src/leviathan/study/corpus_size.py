"""How much text a study fetches and tokenizes: for each vocabulary, the largest token budget
of its cells, as UTF-8 bytes of training text.

The corpus is fetched once for every vocabulary of the configured cells; it must hold, for each
vocabulary, the largest token budget of its cells. The download is sized as max over
vocabularies of budget x corpus.bytes_per_token x (1 + corpus.size_margin) bytes;
`corpus.max_bytes: auto` applies it (config/paper.yaml), and `tokenize.max_bytes: auto` each
vocabulary's own. Torch-free: the workflow sizes the download at parse time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from leviathan.cells import config_cells
from leviathan.study.resolve import cell_train_config


def vocab_budgets(config: Mapping[str, Any]) -> dict[str, int]:
    """The largest training-token budget of each vocabulary's cells."""
    out: dict[str, int] = {}
    for cell in config_cells(config):
        tc = cell_train_config(config, cell)
        out[cell.vocab] = max(out.get(cell.vocab, 0), tc.max_steps * tc.tokens_per_step)
    return dict(sorted(out.items()))


def corpus_bytes(
    config: Mapping[str, Any], budgets: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Training-text bytes each vocabulary needs (budget x bytes/token x (1 + margin));
    `budgets`: vocab_budgets(config), where the caller has them already."""
    corpus = config.get("corpus") or {}
    per_token, margin = float(corpus["bytes_per_token"]), float(corpus["size_margin"])
    budgets = vocab_budgets(config) if budgets is None else budgets
    return {v: math.ceil(b * per_token * (1 + margin)) for v, b in budgets.items()}


def fetch_max_bytes(config: Mapping[str, Any]) -> int | None:
    """corpus.max_bytes as the fetch applies it (`auto`: sized from the studies' budgets)."""
    value = (config.get("corpus") or {}).get("max_bytes")
    if value == "auto":
        return max(corpus_bytes(config).values())
    return value  # type: ignore[no-any-return]

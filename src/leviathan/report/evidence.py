"""What a reported number rests on: its scale, training tokens and seeds, and whether it is a smoke test.

Every row of a report table and every panel of a figure carries these labels, read from the
runs' own records (each cell's final checkpoint state: `tokens`), never written by hand. A
cell trained on fewer tokens than the config's `report.smoke_test.below_tokens` is a smoke
test: its numbers check that the pipeline runs and are labelled so wherever they appear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from leviathan import layout
from leviathan.cells import Cell
from leviathan.report.cellmap import DocumentCache
from leviathan.train.recipe import recipe_differences, recipe_text, scale_default

SMOKE = "smoke test"
FULL = "full run"
# the recipe's differences from the scale's default (`lev.n_heads=4, lr=1e-3`; blank: the default)
RECIPE = "recipe"
# the label columns every table of trained cells carries (after its own labels)
EVIDENCE_COLUMNS = ("train_tokens", "evidence", RECIPE)
# the sign convention of every gain column of the report (relative to tied, or in points/nats)
GAIN_CONVENTION = (
    "every *_gain column: positive = better than tied (lower loss or perplexity, higher accuracy; "
    "which tied configuration: the `baseline` column, where a table has one); relative gains in "
    "% (the CSV holds the fraction), accuracy gains in points"
)


@dataclass(frozen=True)
class SmokePolicy:
    """`report.smoke_test` of the config: the size below which a run is a smoke test, and why."""

    below_tokens: int
    reason: str

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SmokePolicy:
        """From a validated config (the schema fills the defaults)."""
        section = (config.get("report") or {}).get("smoke_test")
        if not section or "below_tokens" not in section or "reason" not in section:
            raise ValueError(
                "config has no report.smoke_test.below_tokens/reason: resolve it with "
                "leviathan.study.config.resolve (the schema fills the defaults)"
            )
        return cls(int(section["below_tokens"]), str(section["reason"]))

    @classmethod
    def default(cls) -> SmokePolicy:
        """The schema's defaults (workflow/schemas/config.schema.yaml)."""
        schema = yaml.safe_load((layout.repo_root() / layout.CONFIG_SCHEMA).read_text())
        props = schema["properties"]["report"]["properties"]["smoke_test"]["properties"]
        return cls(int(props["below_tokens"]["default"]), str(props["reason"]["default"]))

    def is_smoke(self, tokens: Iterable[int]) -> bool:
        return any(int(t) < self.below_tokens for t in tokens)

    def note(self) -> str:
        return (
            f"A row or panel marked '{SMOKE}' rests on runs of fewer than {self.below_tokens:,} "
            f"training tokens (report.smoke_test.below_tokens): {self.reason}."
        )


def trained_tokens(cells: Sequence[Cell], docs: DocumentCache) -> list[int]:
    """The tokens each cell was trained on, from its final checkpoint's own state."""
    return [int(docs.get(layout.final_marker(c))["tokens"]) for c in cells]


def tokens_label(tokens: Sequence[int]) -> str:
    """`30,720`, or `30,720-40,960` where the seeds' runs differ."""
    lo, hi = min(tokens), max(tokens)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def recipe_label(
    cells: Sequence[Cell], docs: DocumentCache, train: Mapping[str, Any] | None = None
) -> str:
    """What the cells were trained with beyond their scale's default recipe (the scale's, with
    config.train.<scale>: `train`), read from each final checkpoint's recorded training config
    (leviathan.train.recipe.recipe_differences): `lev.n_heads=4`, `lr=1e-3`; "" for the
    default. A row of several variants (tied beside leviathan) names each non-default one:
    `leviathan@lr1e-3: lr=1e-3`; seeds of different recipes are joined by ` | `."""
    by_variant: dict[str, list[str]] = {}
    for c in cells:
        record = docs.get(layout.final_marker(c))["train_config"]
        text = recipe_text(recipe_differences(scale_default(train or {}, record), record))
        texts = by_variant.setdefault(str(c.variant), [])
        if text not in texts:
            texts.append(text)
    if len(by_variant) == 1:
        return " | ".join(t for t in next(iter(by_variant.values())) if t)
    return "; ".join(
        f"{variant}: {' | '.join(t for t in texts if t)}"
        for variant, texts in by_variant.items()
        if any(texts)
    )


def evidence_labels(
    cells: Sequence[Cell],
    docs: DocumentCache,
    policy: SmokePolicy,
    train: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The EVIDENCE_COLUMNS labels of a row computed from `cells` (all the cells it reads);
    `train`: config.train, the scales' default recipes the `recipe` label is against."""
    tokens = trained_tokens(cells, docs)
    return {
        "train_tokens": tokens_label(tokens),
        "evidence": SMOKE if policy.is_smoke(tokens) else FULL,
        RECIPE: recipe_label(cells, docs, train),
    }


def caption(scale: str, tokens: Sequence[int], seeds: Sequence[int], policy: SmokePolicy) -> str:
    """What a figure panel rests on: `micro, 30,720 tokens, seed 0 (smoke test)`."""
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {','.join(map(str, seeds))}"
    smoke = f" ({SMOKE.upper()})" if policy.is_smoke(tokens) else ""
    return f"{scale}, {tokens_label(tokens)} tokens, {seed_text}{smoke}"

"""The experiment's identity: studies -> cells, the grid (a cell's paths: leviathan.layout).

A study is scales x vocabs x variants x seeds (`seeds_by_scale.<scale>` in place of `seeds`
at that scale); the DAG trains the union of the studies' cells, each once however many
studies use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from leviathan import layout


@dataclass(frozen=True, order=True)
class Cell:
    scale: str
    vocab: str
    variant: str
    seed: int
    results: str  # the study's results key (layout.results_key): where its files live

    @property
    def key(self) -> str:
        """`<scale>/<vocab>/<variant>/seed<k>` (config.train overrides are keyed by it too)."""
        return layout.cell_key(self)

    def as_wildcards(self) -> dict[str, str]:
        return {
            "scale": self.scale,
            "vocab": self.vocab,
            "variant": self.variant,
            "seed": str(self.seed),
            "results": self.results,
        }


def study_seeds(study: Mapping[str, Any], scale: str) -> list[int]:
    """A study's seeds at a scale: its `seeds_by_scale.<scale>` where given, else its `seeds`
    (e.g. 3 seeds where the effect is small and runs are cheap, one elsewhere)."""
    return [int(s) for s in (study.get("seeds_by_scale") or {}).get(scale, study["seeds"])]


def study_cells(study: Mapping[str, Any], results: str) -> list[Cell]:
    return [
        Cell(scale, vocab, variant, seed, results)
        for scale in study["scales"]
        for vocab in study["vocabs"]
        for variant in study["variants"]
        for seed in study_seeds(study, scale)
    ]


def cells(studies: Mapping[str, Mapping[str, Any]], results: str) -> list[Cell]:
    """The union of all studies' cells, deduplicated, in a stable (sorted) order; their
    results under `results` (layout.results_key)."""
    return sorted({cell for study in studies.values() for cell in study_cells(study, results)})


def config_cells(config: Mapping[str, Any]) -> list[Cell]:
    """The cells of a workflow config's studies, with its results key."""
    return cells(config["studies"], layout.config_results_key(config))


def wildcard_pattern(values: Iterable[Any]) -> str:
    """A regex alternative of exactly these values (Snakemake wildcard constraint)."""
    import re

    return "|".join(re.escape(str(v)) for v in sorted({str(v) for v in values}))

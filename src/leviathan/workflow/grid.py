"""Studies -> cells -> paths: the single place that says where every artifact lives.

A study is scales x vocabs x variants x seeds; the DAG trains the union of the studies'
cells, each once however many studies use it. Paths are readable and stable:
    data/corpus/<corpus>/                        raw text splits (+ manifests)
    data/tokens/<corpus>/<vocab>/                train.bin, val.bin, counts.npy (+ manifests)
    results/runs/<scale>/<vocab>/<variant>/seed<k>/   checkpoints/, metrics.jsonl
    results/eval/<scale>/<vocab>/<variant>/seed<k>/   evaluation JSON
    results/export/<scale>/<vocab>/<variant>/seed<k>/ transformers checkpoint (`leviathan export`)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FINAL_MARKER = "checkpoints/final/state.json"


@dataclass(frozen=True, order=True)
class Cell:
    scale: str
    vocab: str
    variant: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.scale}/{self.vocab}/{self.variant}/seed{self.seed}"

    @property
    def run_dir(self) -> str:
        return f"results/runs/{self.key}"

    @property
    def final_marker(self) -> str:
        return f"{self.run_dir}/{FINAL_MARKER}"

    @property
    def eval_dir(self) -> str:
        return f"results/eval/{self.key}"

    def eval_output(self, kind: str) -> str:
        """The JSON an evaluation (val, wikitext, lm_eval) of this cell writes."""
        return f"{self.eval_dir}/{kind}.json"

    @property
    def export_dir(self) -> str:
        return f"results/export/{self.key}"

    def as_wildcards(self) -> dict[str, str]:
        return {
            "scale": self.scale,
            "vocab": self.vocab,
            "variant": self.variant,
            "seed": str(self.seed),
        }


def study_cells(study: Mapping[str, Any]) -> list[Cell]:
    return [
        Cell(scale, vocab, variant, int(seed))
        for scale in study["scales"]
        for vocab in study["vocabs"]
        for variant in study["variants"]
        for seed in study["seeds"]
    ]


def cells(studies: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
    """The union of all studies' cells, deduplicated, in a stable (sorted) order."""
    return sorted({cell for study in studies.values() for cell in study_cells(study)})


def sample_efficiency_path(scale: str, vocab: str, seed: int | str) -> str:
    return f"results/eval/{scale}/{vocab}/sample_efficiency_seed{seed}.json"


def tokens_dir(corpus: str, vocab: str) -> str:
    return f"data/tokens/{corpus}/{vocab}"


def corpus_dir(corpus: str) -> str:
    return f"data/corpus/{corpus}"


BENCHMARK_SUFFIX = ".benchmark.tsv"


def benchmark_path(directory: str, rule: str, tag: str = "") -> str:
    """Where a job of `rule` writes its Snakemake benchmark (`tag` tells apart jobs of one rule
    in one directory): beside the job's outputs, so the file lives in (and travels with) the
    DVC stage output that holds them."""
    return f"{directory}/{rule}{'.' + tag if tag else ''}{BENCHMARK_SUFFIX}"


def benchmark_rule(path: str) -> str:
    """The rule whose benchmark file `path` is."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(BENCHMARK_SUFFIX):
        raise ValueError(f"{path}: not a benchmark file (*{BENCHMARK_SUFFIX})")
    return name.split(".", 1)[0]


def wildcard_pattern(values: Iterable[Any]) -> str:
    """A regex alternative of exactly these values (Snakemake wildcard constraint)."""
    import re

    return "|".join(re.escape(str(v)) for v in sorted({str(v) for v in values}))

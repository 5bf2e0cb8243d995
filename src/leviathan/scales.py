"""The named scales (docs/method.md §4): one record per size holds everything about it, the
backbone shape, the LEV shape and the training recipe (as OLMo-core keeps a model preset as
one named config). The model (`leviathan.model.model_config`), the training config
(`leviathan.train.config.train_config`), the plan, `leviathan params` and the workflow's
config checks all read these records; nothing else names a scale's numbers.

Names count *tied* parameters including the embedding at o200k_base (the paper's
convention); `leviathan params` prints the counts the code actually gives. The paper fixes
D=1024 at 400M and D=2048 at 1.2B; layer counts, heads, FFN widths and the 200M shape are
RECON (documented in README.md, "Parameter accounting"). FFN width is ~8/3 D rounded up to a
multiple of 64 (the SwiGLU convention). Layer counts are chosen against the paper's own
figures: 400M untied = 611M (16 layers), 1.2B leviathan vs tied = +0.20% parameters and ~21
training tokens per parameter (14 layers: 1.118B tied; 16 layers would give 1.219B and
+0.185%), 200M at ~21 tokens per parameter for its 4.2B tokens (7 layers: 203M).

Recipe: context 512 and 512 sequences per step are the paper's, as are the token budgets
4.2B / 8.4B / 24.1B; the paper gives no learning rate: the peaks are RECON (GPT-3-like for
these sizes). `micro` (CI, seconds) and `tiny` (CPU demo, minutes) shrink everything, LEV
included, so that the generator stays a small part of a small model; the large scales use
LEV's RECON defaults (`leviathan.model.config.LEVConfig`, the paper's 1.21M + 512 D).

Beyond the paper (its first limitation, docs/method.md §4): `3b` and `7b`, trained sharded
(FSDP). 7b is OLMo-7B's and Llama-2-7B's backbone (D 4096, 32 layers of 32 heads, FFN 11008);
3b takes Llama-3.2-3B's width (D 3072, 24 heads of 128, FFN 8192 = 8/3 D) at OLMo's depth
ratio D / layers = 128 (OLMo-1B 2048/16, OLMo-7B 4096/32): 24 layers, 3.33B tied at o200k
(Llama-3.2-3B's 28 layers share keys and values across heads, which this backbone does not).
Context 512 and LEV are the paper's; token budgets ~20 tokens per tied parameter (the paper's
1.2b: 21.6); batch (1M and 2M tokens) and peak learning rate are GPT-3's at 2.7B and 6.7B
(RECON).

Torch-free: the workflow reads the recipes at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# The backbone fields a scale sets (ModelConfig fields) and its recipe (TrainConfig fields)
SHAPE_FIELDS = ("d_model", "n_layers", "n_heads", "ffn_hidden")
RECIPE_FIELDS = ("context", "global_batch", "micro_batch", "total_tokens", "lr")


@dataclass(frozen=True)
class Scale:
    """One named size: backbone shape, LEV shape and training recipe."""

    name: str
    # backbone (pre-norm decoder, SwiGLU FFN)
    d_model: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    # recipe (TrainConfig fields)
    total_tokens: int  # the token budget of a run
    lr: float  # peak learning rate
    context: int = 512  # tokens per sequence; also the model's max_seq_len
    global_batch: int = 512  # sequences per optimizer step, over all ranks
    micro_batch: int = 16  # sequences per forward/backward on one device
    # LEV fields that differ from LEVConfig's RECON defaults (empty: the paper's LEV)
    lev: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def model_fields(self) -> dict[str, Any]:
        """The ModelConfig fields this scale fixes (shape, context, LEV)."""
        shape = {name: getattr(self, name) for name in SHAPE_FIELDS}
        return {**shape, "max_seq_len": self.context, "lev": dict(self.lev)}

    def recipe(self) -> dict[str, Any]:
        """The TrainConfig fields this scale fixes (RECIPE_FIELDS)."""
        return {name: getattr(self, name) for name in RECIPE_FIELDS}


SCALES: dict[str, Scale] = {
    s.name: s
    for s in (
        Scale(
            name="micro",
            d_model=64,
            n_layers=2,
            n_heads=4,
            ffn_hidden=192,
            total_tokens=8 * 64 * 40,
            lr=3e-3,
            context=64,
            global_batch=8,
            micro_batch=8,
            lev=MappingProxyType({"d_seed": 16, "n_heads": 2, "n_knots": 8, "rank": 16}),
        ),
        Scale(
            name="tiny",
            d_model=256,
            n_layers=4,
            n_heads=4,
            ffn_hidden=704,
            total_tokens=16 * 256 * 300,
            lr=2e-3,
            context=256,
            global_batch=16,
            micro_batch=8,
            lev=MappingProxyType({"d_seed": 64, "n_heads": 4, "n_knots": 16, "rank": 32}),
        ),
        Scale(
            name="200m",
            d_model=768,
            n_layers=7,
            n_heads=12,
            ffn_hidden=2048,
            total_tokens=4_200_000_000,
            lr=6e-4,
        ),
        Scale(
            name="400m",
            d_model=1024,
            n_layers=16,
            n_heads=16,
            ffn_hidden=2752,
            total_tokens=8_400_000_000,
            lr=3e-4,
        ),
        Scale(
            name="1.2b",
            d_model=2048,
            n_layers=14,
            n_heads=16,
            ffn_hidden=5504,
            total_tokens=24_100_000_000,
            lr=2e-4,
        ),
        # Beyond the paper (its first limitation): FSDP scales, planned in config/scale.yaml
        Scale(
            name="3b",
            d_model=3072,
            n_layers=24,
            n_heads=24,
            ffn_hidden=8192,
            total_tokens=66_600_000_000,
            lr=1.6e-4,
            global_batch=2048,
            micro_batch=16,
        ),
        Scale(
            name="7b",
            d_model=4096,
            n_layers=32,
            n_heads=32,
            ffn_hidden=11008,
            total_tokens=146_000_000_000,
            lr=1.2e-4,
            global_batch=4096,
            micro_batch=16,
        ),
    )
}


def get_scale(name: str) -> Scale:
    """Look a scale up by name; an unknown name lists the valid ones."""
    try:
        return SCALES[name]
    except KeyError:
        raise ValueError(f"unknown scale {name!r}: use one of {', '.join(SCALES)}") from None

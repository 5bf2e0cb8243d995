"""Scale presets (SPEC section 4): backbone shapes per named scale.

Names count *tied* parameters including the embedding at o200k_base (the paper's
convention); `leviathan params` prints the counts the code actually gives. The paper
fixes D=1024 at 400M and D=2048 at 1.2B; layer counts, heads, FFN widths and the 200M shape
are RECON (documented in README.md, "Parameter accounting"). FFN width is ~8/3 D rounded
up to a multiple of 64 (the SwiGLU convention). Layer counts are chosen against the paper's
own figures: 400M untied = 611M (16 layers), 1.2B leviathan vs tied = +0.20% parameters and
~21 training tokens per parameter (14 layers: 1.118B tied; 16 layers would give 1.219B and
+0.185%), 200M at ~21 tokens per parameter for its 4.2B tokens (7 layers: 203M).

`micro` (CI, seconds) and `tiny` (CPU demo, minutes) also shrink LEV so that the generator
stays a small part of a small model; the large scales use the paper's RECON defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leviathan.model.config import LEVConfig, ModelConfig
from leviathan.vocab import get_vocab


@dataclass(frozen=True)
class ScalePreset:
    d_model: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    max_seq_len: int
    lev: LEVConfig = field(default_factory=LEVConfig)


SCALES: dict[str, ScalePreset] = {
    "micro": ScalePreset(
        d_model=64,
        n_layers=2,
        n_heads=4,
        ffn_hidden=192,
        max_seq_len=64,
        lev=LEVConfig(d_seed=16, n_heads=2, n_knots=8, rank=16),
    ),
    "tiny": ScalePreset(
        d_model=256,
        n_layers=4,
        n_heads=4,
        ffn_hidden=704,
        max_seq_len=256,
        lev=LEVConfig(d_seed=64, n_heads=4, n_knots=16, rank=32),
    ),
    "200m": ScalePreset(d_model=768, n_layers=7, n_heads=12, ffn_hidden=2048, max_seq_len=512),
    "400m": ScalePreset(d_model=1024, n_layers=16, n_heads=16, ffn_hidden=2752, max_seq_len=512),
    "1.2b": ScalePreset(d_model=2048, n_layers=14, n_heads=16, ffn_hidden=5504, max_seq_len=512),
}


def model_config(
    scale: str,
    vocab: str,
    variant: str,
    *,
    vocab_size: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> ModelConfig:
    """The model config of one cell: a scale preset, a vocabulary and a variant.

    vocab_size defaults to the tokenizer's n_vocab; `overrides` replaces any ModelConfig
    field (a nested dict for `lev`).
    """
    try:
        preset = SCALES[scale]
    except KeyError:
        raise ValueError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}") from None
    fields: dict[str, Any] = {
        "vocab_size": vocab_size or get_vocab(vocab).n_vocab,
        "d_model": preset.d_model,
        "n_layers": preset.n_layers,
        "n_heads": preset.n_heads,
        "ffn_hidden": preset.ffn_hidden,
        "max_seq_len": preset.max_seq_len,
        "variant": variant,
        "lev": dict(preset.lev.__dict__),
    }
    for key, value in (overrides or {}).items():
        if key == "lev" and isinstance(value, dict):
            fields["lev"].update(value)
        else:
            fields[key] = value
    return ModelConfig.from_dict(fields).validate()

"""Model configuration: backbone shape, variant choice and the LEV hyper-parameters.

Every reconstruction (RECON) choice of the paper's method is a field here with its
default, never a hidden constant. `ModelConfig.validate()` names the bad value and the fix.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from leviathan.scales import get_scale
from leviathan.vocab import get_vocab


def digit_base(vocab_size: int, n_digits: int) -> int:
    """Smallest base b with b**k >= V (docs/method.md §2, step 1: o200k -> 59, gpt2 -> 37, cl100k -> 47)."""
    b = max(2, math.ceil(vocab_size ** (1.0 / n_digits)))
    while (b - 1) ** n_digits >= vocab_size and b > 2:  # guard float rounding up
        b -= 1
    while b**n_digits < vocab_size:  # guard float rounding down
        b += 1
    return b


# the six input/output variants' names (docs/method.md §3), in the report's order (tied first);
# their builders: leviathan.model.variants.VARIANTS, which holds exactly these
VARIANT_NAMES = ("tied", "untied", "albert", "flat_mlp", "factored_mlp", "leviathan")
LEV_BASES = ("unnormalised", "normalised")
LEV_KNOT_SCALES = ("fixed", "learned")


@dataclass(frozen=True)
class LEVConfig:
    """LEV (docs/method.md §2). Defaults are the RECON values that reproduce 1.21M + 512 D.

    n_digits: k, digits per id. base: b; None derives ceil(V**(1/k)).
    d_seed: seed / coordinate width. n_heads: h. n_knots: kappa, B-spline centres on [0, 1].
    rank: r, rank of the tensor product (KHRONOS). sigmoid_scale: the 1/2 applied after
    LayerNorm (RECON: LN is scale invariant, so the paper's 1/2 must act after it).
    log_eps: |phi| is clamped to this before the log; the gradient stays exact (product of
    the other factors) even where phi is zero.

    Three details on which the public sources differ (RECON, docs/method.md §6):
    seed_bias: the bias c_l of the head projection before the LayerNorm (the paper's count
    1,205,376 + 512 D needs it; off: h * d_seed parameters fewer).
    basis: "unnormalised" (the B-splines as they are: their sum is 0.875 at t = 0 and 1, as
    the authors' KHRONOS code) or "normalised" (divided by their sum over the kappa centres,
    1 in the interior, as a public third-party PyTorch LEV).
    knot_scale: "fixed" (x = t (kappa - 1)) or "learned" (u_j = |t - g_j| s_lp with one
    scale s per head and seed coordinate, initialised to kappa - 1, as KHRONOS; h * d_seed
    parameters more).
    """

    n_digits: int = 3
    base: int | None = None
    d_seed: int = 128
    n_heads: int = 8
    n_knots: int = 16
    rank: int = 64
    sigmoid_scale: float = 0.5
    ln_eps: float = 1e-5
    log_eps: float = 1e-30
    init_std: float = 0.02  # codebooks and head projections W_l
    spline_init_std: float = 0.1  # S ~ 1 + spline_init_std * N(0, 1)
    chunk_elems: int = 1 << 20  # elements of phi held at once (bounds LEV memory; cache-sized)
    seed_bias: bool = True
    basis: str = "unnormalised"  # one of LEV_BASES
    knot_scale: str = "fixed"  # one of LEV_KNOT_SCALES


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only Transformer plus one input/output variant (docs/method.md §3-4).

    mlp_hidden: width of the 2-layer SiLU MLP of flat_mlp / factored_mlp and the inner
    width e of albert; None derives it so the variant's input-side parameter count matches
    LEV's at the same D and V (see `leviathan.model.variants`).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    max_seq_len: int = 512
    variant: str = "leviathan"
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    mlp_hidden: int | None = None
    lev: LEVConfig = field(default_factory=LEVConfig)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def lev_base(self) -> int:
        if self.lev.base is not None:
            return self.lev.base
        return digit_base(self.vocab_size, self.lev.n_digits)

    def validate(self) -> ModelConfig:
        """Raise ValueError naming the inconsistent value and how to fix it; return self."""
        positive = {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "ffn_hidden": self.ffn_hidden,
            "max_seq_len": self.max_seq_len,
            "lev.n_digits": self.lev.n_digits,
            "lev.d_seed": self.lev.d_seed,
            "lev.n_heads": self.lev.n_heads,
            "lev.rank": self.lev.rank,
            "lev.chunk_elems": self.lev.chunk_elems,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if self.variant not in VARIANT_NAMES:
            raise ValueError(
                f"variant={self.variant!r} is unknown: use one of {', '.join(VARIANT_NAMES)}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose n_heads among the divisors of d_model (e.g. {_divisor_hint(self.d_model)})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim=d_model/n_heads={self.head_dim} must be even for RoPE: "
                "change d_model or n_heads"
            )
        if self.lev.n_knots < 3:
            raise ValueError(
                f"lev.n_knots={self.lev.n_knots} must be >= 3 (a quadratic B-spline basis "
                "needs three centres)"
            )
        choices = {"lev.basis": (self.lev.basis, LEV_BASES)}
        choices["lev.knot_scale"] = (self.lev.knot_scale, LEV_KNOT_SCALES)
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is unknown: use one of {', '.join(allowed)}")
        if not isinstance(self.lev.seed_bias, bool):
            raise ValueError(f"lev.seed_bias={self.lev.seed_bias!r} must be true or false")
        b, k = self.lev_base, self.lev.n_digits
        if b < 2 or b**k < self.vocab_size:
            raise ValueError(
                f"lev.base={b} with lev.n_digits={k} covers only {b**k} ids < vocab_size="
                f"{self.vocab_size}: set lev.base to at least "
                f"{digit_base(self.vocab_size, k)} or leave it unset (null) to derive it"
            )
        if self.mlp_hidden is not None and self.mlp_hidden <= 0:
            raise ValueError(f"mlp_hidden={self.mlp_hidden} must be positive or null (derive)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        d = dict(d)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(
                f"unknown model config key(s) {unknown}: valid keys are {sorted(known)}"
            )
        lev = d.pop("lev", None) or {}
        if isinstance(lev, dict):
            lev_known = set(LEVConfig.__dataclass_fields__)
            bad = sorted(set(lev) - lev_known)
            if bad:
                raise ValueError(
                    f"unknown lev config key(s) {bad}: valid keys are {sorted(lev_known)}"
                )
            lev = LEVConfig(**lev)
        return cls(lev=lev, **d)

    def with_(self, **changes: Any) -> ModelConfig:
        return replace(self, **changes)


def model_config(
    scale: str,
    vocab: str,
    variant: str,
    *,
    vocab_size: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> ModelConfig:
    """The model config of one cell: a named scale (`leviathan.scales`), a vocabulary and a
    variant.

    vocab_size defaults to the tokenizer's n_vocab; `overrides` replaces any ModelConfig
    field (a nested dict for `lev`).
    """
    fields: dict[str, Any] = {
        **get_scale(scale).model_fields(),
        "vocab_size": vocab_size or get_vocab(vocab).n_vocab,
        "variant": variant,
    }
    for key, value in (overrides or {}).items():
        if key == "lev" and isinstance(value, dict):
            fields["lev"].update(value)
        else:
            fields[key] = value
    return ModelConfig.from_dict(fields).validate()


def _divisor_hint(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0 and n // d >= 16]
    return ", ".join(str(d) for d in divs[-4:]) or "1"

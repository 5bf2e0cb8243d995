"""The paper's cost claims (parameters, FLOPs), recomputed by the model's own counter and set beside the reported numbers.

Each check states what the paper reports, what our model gives, their relative difference,
and, where the reconstruction cannot reproduce the number, why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from leviathan.model.accounting import account, overhead
from leviathan.model.config import model_config
from leviathan.report.paper import Paper

TOLERANCE = 0.01  # relative


@dataclass(frozen=True)
class CostCheck:
    """One cost claim of the paper beside our counter's number (relative difference within TOLERANCE: ok)."""

    claim: str
    paper: float
    ours: float
    note: str = ""
    percent: bool = False  # an overhead: a fraction of tied's, shown in percent

    def shown(self, value: float) -> str:
        if self.percent:
            return f"{value:+.3%}"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.6g}"

    @property
    def rel_diff(self) -> float:
        return self.ours / self.paper - 1.0

    @property
    def ok(self) -> bool:
        return abs(self.rel_diff) <= TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rel_diff": self.rel_diff, "ok": self.ok}


def cost_checks(vocab: str = "o200k_base") -> list[CostCheck]:
    """The paper's parameter and FLOP claims (config/paper_reported.yaml `cost`; docs/method.md §1) recomputed by our counter."""
    paper = Paper.load()
    cost, reported_1_2b = paper.cost(), paper.cost("1.2b")
    acc = {
        (scale, variant): account(model_config(scale, vocab, variant))
        for scale in ("400m", "1.2b")
        for variant in ("tied", "untied", "leviathan")
    }
    lev_1024 = acc["400m", "leviathan"].input_params
    lev_2048 = acc["1.2b", "leviathan"].input_params
    per_d = (lev_2048 - lev_1024) / (2048 - 1024)
    big_lev, big_tied = acc["1.2b", "leviathan"], acc["1.2b", "tied"]
    cost_1_2b = overhead(big_lev, big_tied)
    implied_total = lev_2048 / reported_1_2b["param_overhead"]
    checks = [
        CostCheck("LEV parameters per unit of D", cost["lev_params_per_d"], per_d),
        CostCheck("LEV parameters, fixed part", cost["lev_params_fixed"], lev_1024 - 1024 * per_d),
        CostCheck("LEV parameters at D=2048 (1.2B)", cost["lev_params_at_d2048"], lev_2048),
        CostCheck(
            "V x D embedding at 1.2B",
            reported_1_2b["embedding_params"],
            big_tied.input_params,
            note=(
                f"ours uses tiktoken's n_vocab={big_tied.vocab_size}; the paper's V="
                f"{cost['o200k_vocab_size']} gives exactly its figure (--vocab-size "
                f"{cost['o200k_vocab_size']})"
            ),
        ),
        CostCheck(
            "untied 400M total parameters",
            paper.ablation("400m")["untied"]["params"],
            acc["400m", "untied"].total_params,
        ),
        CostCheck(
            "leviathan vs tied parameters at 1.2B",
            reported_1_2b["param_overhead"],
            cost_1_2b["params"],
            percent=True,
            note=(
                f"the paper's +{reported_1_2b['param_overhead']:.2%} with LEV's {lev_2048:,} parameters "
                f"implies a tied model of {implied_total / 1e9:.2f}B; our RECON 1.2B shape "
                f"(D={big_tied.d_model}, {big_tied.n_layers} layers) has "
                f"{big_tied.total_params / 1e9:.3f}B"
            ),
        ),
        CostCheck(
            "leviathan vs tied training FLOPs at 1.2B",
            reported_1_2b["flop_overhead"],
            cost_1_2b["train_flops"],
            percent=True,
            note=(
                "ours counts LEV's matmuls and spline multiply-adds per token as if every "
                "position held a distinct id (an upper bound); the paper does not state its "
                "FLOP convention, and its +0.26% exceeds what LEV's arithmetic "
                f"({big_lev.input_flops / 1e6:.2f} MFLOP forward per id) can account for at "
                f"{big_tied.forward_flops / 1e9:.2f} GFLOP forward per token"
            ),
        ),
    ]
    return checks

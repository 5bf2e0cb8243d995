"""The paper's internal consistency, checked from config/paper_reported.yaml (its one home).

Each check recomputes a reported number from the other numbers it is derived from, e.g.
perplexity = exp(loss), a relative gain from the two losses, a mean gain from the per-task
numbers, and flags what does not add up (the 1.2B leviathan row reports loss 2.402 and PPL
10.94, but exp(2.402) = 11.05). A reproduction that derives PPL from loss shows the same
difference: this says where it comes from.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from leviathan.report.paper import Paper

PERCENT = (
    "%"  # a relative change, stored as a fraction and shown in percent, as every table shows gains
)
# how the paper's own change is signed, beside the report's convention (evidence.GAIN_CONVENTION)
CHANGE_SIGN = (
    "A PPL change is the paper's own quantity, leviathan's perplexity over tied's minus 1: "
    "negative = better, the opposite sign of the report's *_gain columns (positive = better); "
    "a relative gain or change in % (the CSV holds the fraction: -0.021 = -2.1%), accuracy in points."
)


@dataclass(frozen=True)
class Consistency:
    what: str
    reported: float
    recomputed: float
    tolerance: float  # absolute: the reported number's rounding
    unit: str = ""  # PERCENT: a relative change (a fraction, shown in %); "points"; "": as is

    @property
    def ok(self) -> bool:
        return abs(self.reported - self.recomputed) <= self.tolerance

    def shown(self, value: float, fmt: str = "g") -> str:
        """A value of this check as the report shows it: a relative change in %."""
        return f"{100.0 * value:{fmt}}%" if self.unit == PERCENT else f"{value:{fmt}}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "difference": self.reported - self.recomputed}


def _decimals(x: float) -> int:
    text = repr(float(x)).rstrip("0").rstrip(".")
    return len(text.split(".")[1]) if "." in text else 0


def _rounding(x: float) -> float:
    """Half a unit in the last reported digit (plus float slack)."""
    return 0.5 * 10 ** -_decimals(x) + 1e-12


def consistency_checks(paper: Paper | None = None) -> list[Consistency]:
    paper = paper or Paper.load()
    out: list[Consistency] = []
    for scale in paper.scales("main"):
        row = paper.main(scale)
        for variant in ("tied", "leviathan"):
            r = row[variant]
            # ppl reported to 2 decimals; the loss's own rounding (+-0.0005) moves exp(loss) too
            slack = _rounding(r["val_ppl"]) + math.exp(r["val_loss"]) * _rounding(r["val_loss"])
            out.append(
                Consistency(
                    f"{scale} {variant}: val PPL = exp(val loss {r['val_loss']})",
                    r["val_ppl"],
                    math.exp(r["val_loss"]),
                    slack,
                )
            )
        tied, lev = row["tied"]["val_ppl"], row["leviathan"]["val_ppl"]
        change = row["leviathan"]["val_ppl_change"]
        out.append(
            Consistency(
                f"{scale}: leviathan val PPL change vs tied ({lev}/{tied} - 1; "
                "the paper's sign: negative = better)",
                change,
                lev / tied - 1,
                _rounding(change) + 0.01 / tied,
                PERCENT,
            )
        )
    for scale in paper.scales("ablation"):
        abl = paper.ablation(scale)
        base = abl["tied"]["val_loss"]
        for variant, r in abl.items():
            recomputed = (base - r["val_loss"]) / base
            out.append(
                Consistency(
                    f"{scale} ablation {variant}: relative loss gain over tied ({base} vs {r['val_loss']})",
                    r["gain"],
                    recomputed,
                    _rounding(r["gain"]) + 2 * 0.0005 / base,
                    PERCENT,
                )
            )
    for scale in paper.scales("downstream"):
        down = paper.downstream(scale)
        gains = [down["leviathan"][t] - down["tied"][t] for t in down["tied"]]
        out.append(
            Consistency(
                f"{scale.upper()} downstream: mean accuracy gain, points",
                down["mean_gain_points"],
                sum(gains) / len(gains),
                _rounding(down["mean_gain_points"]),
                "points",
            )
        )
    return out

"""How the report's Markdown and LaTeX show numbers (the CSV keeps full precision)."""

from __future__ import annotations

import math

from leviathan.report.formatting import format_value


def test_numbers_in_their_columns_units() -> None:
    assert format_value(0.0123, "pct") == "+1.23%"  # a fraction, shown in percent
    assert format_value(3.14159, "loss") == "3.1416"
    assert format_value(12345.678, "int") == "12,346"
    assert format_value(float("nan"), "loss") == "-"


def test_perplexities_stay_readable_at_any_size() -> None:
    assert format_value(10.944, "ppl") == "10.94"
    assert format_value(999_999.0, "ppl") == "999999.00"
    # a word-level bucket of a small model: e^(sum of a rare word's token losses)
    huge = math.exp(34.7)
    shown = format_value(huge, "ppl")
    assert shown == "1.17e+15" and float(shown) == float(f"{huge:.3g}")
    assert format_value(huge, "ci_ppl") == "±1.17e+15"

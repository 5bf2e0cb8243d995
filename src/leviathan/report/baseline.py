"""The tied configuration a row's gains are computed against, and the row's `baseline` label.

A tagged cell (`leviathan@lr1e-3`: a recipe change, README "Sweep a hyperparameter") is compared
with tied trained on the same recipe (`tied@lr1e-3`) where the study has it; where it does not,
with the default tied, and its row's `baseline` says that the two were trained on different
recipes. A named variant (`lev_h4`: a model change) is compared with tied on its recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leviathan.study.sweep import TAG_SEP, split_name

BASELINE = "baseline"  # the label column: the tied configuration a row's gains are against
OTHER_RECIPE = "other recipe"


def tied_baseline(
    groups: Mapping[tuple[str, str, str], Any], scale: str, vocab: str, variant: str
) -> tuple[str | None, str]:
    """(the tied configuration `variant`'s gains are against, None: none; its `baseline` label)."""
    _, tag = split_name(variant)
    same = "tied" + (f"{TAG_SEP}{tag}" if tag else "")
    if variant == same:
        return None, ""
    if (scale, vocab, same) in groups:
        return same, same
    if (scale, vocab, "tied") in groups:
        return "tied", f"tied ({OTHER_RECIPE}: the study has no {same})"
    return None, ""


def baseline_label(variant: str, compared_with: str = "tied") -> str:
    """The `baseline` label of a row compared with `compared_with` whatever its tag (sample
    efficiency: the workflow's baseline is the untagged tied of each seed)."""
    if variant == compared_with:
        return ""
    _, tag = split_name(variant)
    return f"{compared_with} ({OTHER_RECIPE}: @{tag})" if tag else compared_with

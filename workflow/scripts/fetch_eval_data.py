"""Rule fetch_eval_data: one evaluation dataset into data/eval/ (logic: leviathan.data.eval_fetch)."""

from leviathan.data.eval_data import Need
from leviathan.data.eval_fetch import fetch_need
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
fetch_need(Need(**sm.params.need))

"""Rule fetch_corpus: write the configured corpus (logic: leviathan.study.actions)."""

from leviathan.study.actions import fetch_corpus
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
fetch_corpus(sm.params.corpus, sm.params.out_dir)

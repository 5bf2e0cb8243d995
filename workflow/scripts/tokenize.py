"""Rule tokenize: token shards + counts for one vocabulary (logic: leviathan.study.actions)."""

from leviathan.study.actions import tokenize
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
tokenize(sm.params.corpus_dir, sm.wildcards.vocab, sm.params.out_dir, sm.params.options)

"""Rule tokenize: token shards + counts for one vocabulary (logic: leviathan.workflow.steps)."""

from leviathan.workflow.steps import tokenize

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
tokenize(sm.params.corpus_dir, sm.wildcards.vocab, sm.params.out_dir, sm.params.options)

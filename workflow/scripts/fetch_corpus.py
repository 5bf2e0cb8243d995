"""Rule fetch_corpus: write the configured corpus (logic: leviathan.workflow.steps)."""

from leviathan.workflow.steps import fetch_corpus

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
fetch_corpus(sm.params.corpus, sm.params.out_dir)

"""Rule tokenize: token shards + counts for one vocabulary (logic: leviathan.workflow.steps)."""

from pathlib import Path

from leviathan.workflow.steps import tokenize

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
tokenize(
    Path(sm.input.train).parent, sm.wildcards.vocab, Path(sm.output.train).parent, sm.params.options
)

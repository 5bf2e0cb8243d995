"""Every rule's script: the job's logic is leviathan.study.rules, by rule name.

This file never changes: Snakemake reruns a rule's finished jobs when its script changes."""

from leviathan.study.rules import run

run(snakemake)  # type: ignore[name-defined]  # noqa: F821

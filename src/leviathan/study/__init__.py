"""A study's Python side of the Snakemake workflow: its config, cells, sweep, rule actions, logs, launch, preflight and status."""

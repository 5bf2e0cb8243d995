"""The experiment grid and artifact paths the Snakemake workflow is built from."""

"""Where every artifact of the pipeline lives: the one home of its paths and file names.

The rules (through workflow/rules/common.smk, their scripts through `params:`), the trainer's
checkpoints, the evaluation's checkpoint loader, the report and the audit all take their paths
from here. Paths are relative to the working directory (the repository root for the workflow),
readable and stable; <cell> is <scale>/<vocab>/<variant>/seed<k>, and <study> is the
config's `study_name`, or its corpus's name where it gives none (`config_results_key`): every
study writes its results under a name of its own, and shares only its corpus's data:

    config/config.yaml, config/paper_reported.yaml   the default config, the paper's figures
    data/corpus/<corpus>/             raw text splits <split>.jsonl.zst (+ manifests)
    data/tokens/<corpus>/<vocab>/     train.bin, val.bin, counts.npy, word_counts.json (+ manifests)
    results/runs/<study>/<cell>/      checkpoints/ (named by leviathan.checkpoint.files),
                                      metrics.jsonl, out_of_memory.json
    results/eval/<study>/<cell>/      <evaluation>.json (val, wikitext, lm_eval),
                                      lm_eval.samples.jsonl, lm_eval_harness/,
                                      along/val_step<N>.json (evaluate.along)
    results/eval/<study>/<scale>/<vocab>/  sample_efficiency_seed<k>.json, along_seed<k>.json
    results/export/<study>/<cell>/    transformers checkpoint (`leviathan export`)
    results/report/<study>/           tables/, figures/, plots/
    results/report/metrics/<study>/   one DVC metrics JSON per cell (every study's: `dvc metrics show`)
    results/provenance/<sha256>.diff  a dirty checkout's uncommitted changes (manifests name it)
    logs/<step>/...                   one log per job (a cell's: logs/<step>/<study>/<cell>...)
A job's Snakemake benchmark file sits beside its outputs: <dir>/<rule>[.<tag>].benchmark.tsv.

A cell is anything with `scale`, `vocab`, `variant`, `seed` and `results` (its <study>)
attributes: a `leviathan.cells.Cell`, Snakemake's wildcards of a cell rule, or `WILDCARDS` (the
rules' patterns). Functions of cells and of the workflow's directories return str (what
Snakemake and DVC name); functions of the files inside a run, a checkpoint or an output
directory take that directory and return a Path. A rule's script gets the directories it needs
from the rule's `params:`, computed from its input or output files by the inverses here
(`run_of`, `dir_of`), never by counting a path's parents.

Its modules, one job each: `base` (cells, studies, configuration, locks, manifests, runs,
jobs), `data` (corpus text, token shards, the evaluations' datasets) and `outputs`
(evaluations, exports, the report). The names inside a run's `checkpoints/` are
`leviathan.checkpoint.files`'. Each module lists its public names in `__all__`, and this
package exports them all. Import every name from here: `from leviathan import layout`.
"""

from __future__ import annotations

from leviathan.layout import base, data, outputs
from leviathan.layout.base import *  # noqa: F403
from leviathan.layout.data import *  # noqa: F403
from leviathan.layout.outputs import *  # noqa: F403

__all__ = [*base.__all__, *data.__all__, *outputs.__all__]

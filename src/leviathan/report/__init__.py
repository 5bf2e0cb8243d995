"""Reporting: the paper's tables and figures from the evaluation outputs, beside the paper's
reported numbers, and the audit of every number.

Its modules import downwards only (tests/test_imports.py checks that no circle forms):

- values: `predicted` (the roofline's predictions), `cellmap` (a value declared over the fields
  it is read from), `baseline`, `evidence` (what a number rests on), `paper` (its reported
  numbers; `paper_consistency`, `cost_checks`: checks on them), `table` (rows of declared
  values);
- the context a table is built from: `context` (the configured studies, the files read);
- builders, one job each: `columns`, `builders`, `efficiency`, `along_table`, `recon`,
  `throughput`, with their order in `registry`;
- output: `formatting` (Markdown, LaTeX, caption), `status_page`, `resources`, `plots`, the figures
  (`drawing`, `figures`, `lev_figures`, `along_figure`), and `build`, which writes them all;
- the audit on top: `claims`, `chain`, `audit`.
"""

# Shared definitions: the cells of the configured studies (logic in leviathan.study,
# unit-tested there); every path and file name comes from leviathan.layout.
from leviathan import layout
from leviathan.layout import WILDCARDS, benchmark_path, log_file
from leviathan.cells import Cell, config_cells, wildcard_pattern
from leviathan.study import actions, cluster, launch
from leviathan.report.build import PAPER_CHECK, report_inputs
from leviathan.report.plots import plot_paths
from leviathan.report.resources import RESOURCES_TABLE
from leviathan.report.registry import table_caption, table_names, table_paths
from leviathan.study.placeholders import placeholder_error

# a profile's `<your-account>` left as shipped: refused as the workflow loads (dry runs too)
if (placeholder := placeholder_error(workflow.resource_settings)) is not None:
    raise WorkflowError(placeholder)

CORPUS = config["corpus"]["name"]
# where this study's results live: results/<kind>/<study_name>/ (layout.results_key), so two
# studies in one clone never touch each other's results (they share only a corpus's data)
RESULTS = layout.config_results_key(config)
CELLS = config_cells(config)
VOCABS = sorted({c.vocab for c in CELLS})
CORPUS_DIR = layout.corpus_dir(CORPUS)
# the paths of a rule's pattern: a cell's, a tokens directory's, a raw corpus's
RUN_DIR, EVAL_DIR = layout.run_dir(WILDCARDS), layout.eval_dir(WILDCARDS)
TOKENS_DIR = layout.tokens_dir("{corpus}", "{vocab}")
CORPUS_FILES = {
    split: str(layout.corpus_file(layout.corpus_dir("{corpus}"), split)) for split in layout.SPLITS
}
# word-level frequency buckets: the word_counts rule runs (evaluate.word_counts not null)
WORD_COUNTS = config.get("evaluate", {}).get("word_counts") is not None


wildcard_constraints:
    corpus=wildcard_pattern([CORPUS]),
    scale=wildcard_pattern(c.scale for c in CELLS),
    vocab=wildcard_pattern(VOCABS),
    variant=wildcard_pattern(c.variant for c in CELLS),
    seed=r"\d+",
    results=wildcard_pattern([RESULTS]),


def cell_of(wildcards):
    return Cell(
        wildcards.scale, wildcards.vocab, wildcards.variant, int(wildcards.seed), wildcards.results
    )


def res(key):
    """A training job's resource, by the cell's scale (config.resources)."""
    return lambda wildcards: cluster.resources(config, wildcards.scale)[key]


def train_slurm(key):
    """A training job's SLURM setting, by the cell's scale; a scale that does not set it keeps
    the profile's (or command line's) default-resources value, which the rule's own
    declaration of the key would otherwise hide."""
    defaults = workflow.resource_settings.default_resources
    fallback = cluster.default_resource(getattr(defaults, "args", None), key)
    return lambda wildcards: cluster.train_slurm_value(config, wildcards.scale, key, fallback)


# the SLURM settings (partition, account, constraint, qos, extra flags) some scale sets
TRAIN_SLURM = {key: train_slurm(key) for key in cluster.train_slurm_keys(config)}


def val_inputs(wildcards):
    """eval_val's inputs: the cell's checkpoint, val shard, train counts (+ word counts)."""
    tokens = layout.token_files(layout.tokens_dir(CORPUS, wildcards.vocab), WORD_COUNTS)
    del tokens["train"]
    return {"final": layout.final_marker(wildcards), **tokens}


REPORT_TABLES = table_names(report_inputs(config))


def plain_table_paths(name):
    return layout.table_files(layout.tables_dir(RESULTS), name, layout.PLAIN_TABLE_FORMATS)


def table_report(path, name, fmt, caption):
    """A table's file as the HTML report shows it, with its caption (written with the table:
    leviathan.report.registry.table_caption)."""
    labels = {"table": name, "format": fmt}
    return report(path, caption=caption, category="Tables", labels=labels)


def table_outputs():
    out = []
    for name in REPORT_TABLES:
        paths = {fmt: str(p) for fmt, p in table_paths(layout.tables_dir(RESULTS), name).items()}
        out.append(table_report(paths.pop("csv"), name, "csv", table_caption(paths)))
        out += list(paths.values())
    for name in (PAPER_CHECK, RESOURCES_TABLE):  # CSV + Markdown only
        paths = {fmt: str(p) for fmt, p in plain_table_paths(name).items()}
        out.append(table_report(paths.pop("md"), name, "md", table_caption(paths)))
        out += list(paths.values())
    return out


def figure_outputs():
    out = []
    for name in layout.report_figures(REPORT_TABLES):  # the figures of the study's tables
        paths = {
            fmt: str(p) for fmt, p in layout.figure_files(layout.figures_dir(RESULTS), name).items()
        }
        caption, labels = f"../report/figures/{name}.rst", {"figure": name}
        out.append(report(paths.pop("png"), caption=caption, category="Figures", labels=labels))
        out += list(paths.values())
    return out

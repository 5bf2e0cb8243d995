# Shared definitions: the cells of the configured studies and their paths (logic in
# leviathan.workflow, unit-tested there).
from leviathan.workflow.grid import (
    Cell,
    benchmark_path,
    cells,
    corpus_dir,
    sample_efficiency_path,
    tokens_dir,
    wildcard_pattern,
)
from leviathan.workflow import steps
from leviathan.report.build import FIGURES_DIR, TABLES_DIR, report_inputs
from leviathan.report.figures import FIGURE_NAMES
from leviathan.report.plots import plot_paths
from leviathan.report.tables import table_names, table_paths

CORPUS = config["corpus"]["name"]
CELLS = cells(config["studies"])
VOCABS = sorted({c.vocab for c in CELLS})
# word-level frequency buckets: the word_counts rule runs (evaluate.word_counts not null)
WORD_COUNTS = config.get("evaluate", {}).get("word_counts") is not None


wildcard_constraints:
    corpus=wildcard_pattern([CORPUS]),
    scale=wildcard_pattern(c.scale for c in CELLS),
    vocab=wildcard_pattern(VOCABS),
    variant=wildcard_pattern(c.variant for c in CELLS),
    seed=r"\d+",


def cell_of(wildcards):
    return Cell(wildcards.scale, wildcards.vocab, wildcards.variant, int(wildcards.seed))


def res(key):
    """A training job's resource, by the cell's scale (config.resources)."""
    return lambda wildcards: steps.resources(config, wildcards.scale)[key]


def train_slurm(key):
    """A training job's SLURM setting, by the cell's scale; a scale that does not set it keeps
    the profile's (or command line's) default-resources value, which the rule's own
    declaration of the key would otherwise hide."""
    defaults = workflow.resource_settings.default_resources
    fallback = steps.default_resource(getattr(defaults, "args", None), key)
    return lambda wildcards: steps.resources(config, wildcards.scale).get(key, fallback)


# the SLURM settings (partition, account, constraint, qos, extra flags) some scale sets
TRAIN_SLURM = {key: train_slurm(key) for key in steps.train_slurm_keys(config)}


def val_inputs(wildcards):
    """eval_val's inputs: the cell's checkpoint, val shard, train counts (+ word counts)."""
    tokens = tokens_dir(CORPUS, wildcards.vocab)
    inputs = {
        "final": cell_of(wildcards).final_marker,
        "val": f"{tokens}/val.bin",
        "counts": f"{tokens}/counts.npy",
    }
    if WORD_COUNTS:
        inputs["word_counts"] = f"{tokens}/word_counts.json"
    return inputs


REPORT_TABLES = table_names(report_inputs(config))


def table_outputs():
    out = []
    for name in REPORT_TABLES:
        paths = {fmt: str(p) for fmt, p in table_paths(TABLES_DIR, name).items()}
        out.append(report(paths.pop("csv"), caption=f"../report/tables/{name}.rst",
                          category="Tables", labels={"table": name, "format": "csv"}))
        out += list(paths.values())
    out.append(report(f"{TABLES_DIR}/paper_check.md", caption="../report/tables/paper_check.rst",
                      category="Tables", labels={"table": "paper_check", "format": "md"}))
    out.append(f"{TABLES_DIR}/paper_check.csv")
    out.append(report(f"{TABLES_DIR}/resources.md", caption="../report/tables/resources.rst",
                      category="Tables", labels={"table": "resources", "format": "md"}))
    out.append(f"{TABLES_DIR}/resources.csv")
    return out


def figure_outputs():
    out = []
    for name in FIGURE_NAMES:
        out.append(report(f"{FIGURES_DIR}/{name}.png", caption=f"../report/figures/{name}.rst",
                          category="Figures", labels={"figure": name}))
        out.append(f"{FIGURES_DIR}/{name}.pdf")
    return out

# Leviathan reproduction workflow (arXiv 2601.22040).
#   snakemake --profile profiles/local all                       # default: embedded corpus, CPU
#   snakemake all --profile profiles/slurm --configfile config/paper.yaml
# The target goes first: --configfile takes every word after it. Or write `--configfile=FILE`
# (one file), after which a target may follow.
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from leviathan import layout
from leviathan.provenance import package_checkout_error
from leviathan.study import claim
from leviathan.study.config import check_config

min_version("9.0")

# manifests record the code of the package that runs: it must be this checkout's own
if (wrong_package := package_checkout_error(workflow.basedir)) is not None:
    raise WorkflowError(wrong_package)

# the rules' conda env (workflow/envs/leviathan.yaml) installs the package from here, wherever
# Snakemake creates the env (--conda-prefix) or copies the env file; the jobs record this
# checkout's git state (leviathan.provenance.checkout)
os.environ.update(LEVIATHAN_ROOT=workflow.basedir)  # set here, not read: no envvars: directive


# A study's config is complete on its own: `--configfile config/paper.yaml` replaces the default
# instead of extending it (Snakemake would otherwise keep every key of the default that the
# paper's file does not set: its offline stand-ins among them). `--config k=v` alone still
# extends the default. Keys a file leaves out get the schema's defaults, nothing else.
CONFIG_FILES = list(workflow.overwrite_configfiles)
if not CONFIG_FILES:

    configfile: layout.DEFAULT_CONFIG


DVC_NAMES = claim.pop_dvc_names(config)  # what a DVC stage names the study's outputs (params.yaml)
validate(config, layout.CONFIG_SCHEMA)
check_config(config)  # names, value types and each cell's recipe: the code's own, not the schema's

# Whose results folder results/*/<study_name>/ is: another config file naming a study already run
# is refused here, before any job; the run records its study when its jobs start
STUDY_CLAIM = claim.claim(config, claim.study_file(CONFIG_FILES))
claim.check_claim(STUDY_CLAIM)
claim.check_dvc_names(config, DVC_NAMES, STUDY_CLAIM["config"])


onstart:
    claim.record_claim(STUDY_CLAIM)


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/tokenize.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/along.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/export.smk"


rule all:
    default_target: True
    input:
        [layout.final_marker(c) for c in CELLS],
        EVAL_TARGETS,
        REPORT_TARGETS,


# Stage targets (one per DVC stage in dvc.yaml): each builds one layer of the DAG.
# Everything under data/ is built here (word counts too, which only evaluation reads), so that
# the later DVC stages never write into the data stage's output.
DATA_TARGETS = [
    path
    for vocab in VOCABS
    for path in layout.token_files(layout.tokens_dir(CORPUS, vocab), WORD_COUNTS).values()
] + EVAL_DATA_TARGETS  # the evaluations' datasets (data.smk), for compute nodes without the Hub


rule all_data:
    """Raw corpus, token shards and counts for every vocabulary of the configured studies, and
    the datasets of the enabled evaluations."""
    input:
        DATA_TARGETS,


rule all_train:
    """The final checkpoint of every cell."""
    input:
        [layout.final_marker(c) for c in CELLS],


rule all_eval:
    """Every evaluation output."""
    input:
        EVAL_TARGETS,


rule all_report:
    """Tables and figures."""
    input:
        REPORT_TARGETS,


rule all_export:
    """Every trained cell as a transformers checkpoint (results/export/). Not part of `all`:
    it adds a job per cell (10 on the default config), each importing transformers and
    rebuilding its vocabulary's tokenizer (5-20 s of CPU each), and nothing downstream reads
    the exports: ask for them when you ship a model or evaluate it with outside tools."""
    input:
        EXPORT_TARGETS,

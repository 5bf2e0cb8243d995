# Leviathan reproduction workflow (arXiv 2601.22040).
#   snakemake --profile profiles/local all                       # default: embedded corpus, CPU
#   snakemake --profile profiles/slurm --configfile config/paper.yaml all
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/tokenize.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        [c.final_marker for c in CELLS],
        EVAL_TARGETS,
        REPORT_TARGETS,

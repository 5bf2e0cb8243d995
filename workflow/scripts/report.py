"""Rule report (logic: leviathan.report.build, .status, .plots and .resources)."""

from leviathan.cells import config_cells
from leviathan.report.build import write_report
from leviathan.report.plots import write_plot_data
from leviathan.report.resources import write_resources
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
p = sm.params
write_report(
    sm.config,
    p.tables_dir,
    p.figures_dir,
    p.sample_efficiency,
    p.metrics_dir,
    p.along,
    sm.output.status,
)
write_plot_data(config_cells(sm.config), p.plots_dir)
write_resources(sm.input.benchmarks, p.tables_dir)

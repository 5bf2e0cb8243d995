"""Rule report (logic: leviathan.report.build, .plots and .resources)."""

from leviathan.report.build import FIGURES_DIR, TABLES_DIR, write_report
from leviathan.report.plots import write_plot_data
from leviathan.report.resources import write_resources
from leviathan.workflow.grid import cells

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
se = [p for p in sm.input.evals if p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_report(sm.config, TABLES_DIR, FIGURES_DIR, se)
write_plot_data(cells(sm.config["studies"]))
write_resources(sm.input.benchmarks, TABLES_DIR)

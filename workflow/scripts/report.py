"""Rule report (logic: leviathan.report.build)."""
from leviathan.report.build import FIGURES_DIR, TABLES_DIR, write_report

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
se = [p for p in sm.input.evals if p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_report(sm.config, TABLES_DIR, FIGURES_DIR, se)

"""How a table is shown: its numbers as text, its Markdown, LaTeX, caption and (metrics table) JSON.

The CSV keeps full precision; every rendering here is a function of the CSV's frame alone, so
`leviathan audit` can re-render a table and compare it with the file. The caption (`rst`) is
what the HTML report shows above the table: the same title and notes as the Markdown, so a
table's description is written once, in its `Table`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from leviathan.layout import CAPTION_FORMAT
from leviathan.report.baseline import BASELINE
from leviathan.report.cellmap import CI_SUFFIX
from leviathan.report.evidence import RECIPE
from leviathan.report.table import STAND_IN_COLUMN, Table, missing, smoke_rows, stand_in_rows

# column -> how it is shown in Markdown/LaTeX: "loss" 4 decimals ("dloss" signed), "pct" a fraction in %,
# "points" already in percent/points, "int" an integer count, "ppl" 2 decimals
FORMATS = {
    "loss": "{:.4f}",
    "dloss": "{:+.4f}",  # a difference of losses (nats), signed
    "ppl": "{:.2f}",
    "pct": "{:+.2f}%",
    "points": "{:.1f}",
    "dpoints": "{:+.1f}",
    "int": "{:,.0f}",
    "num": "{:.4g}",
    "share": "{:.1f}%",  # a fraction of a whole in % (MFU), unsigned
    "gb": "{:.2f} GB",  # bytes in GB (1e9)
}
# what a format shows its CSV value times (the CSV keeps fractions and bytes)
SCALE = {"pct": 100.0, "share": 100.0, "gb": 1e-9}
# label columns whose empty value means something (the default recipe; no baseline: tied itself):
# blank, as the CSV's empty cell reads back
BLANK_LABELS = (RECIPE, BASELINE)
# A table whose rows hold different quantities (paper_vs_ours) names each row's format in this
# label column; its numbers are shown in it, and the column as the unit it reads in.
ROW_FORMAT = "unit"
UNITS = {
    "loss": "nats",
    "dloss": "nats",
    "ppl": "perplexity",
    "pct": "%",
    "points": "points",
    "dpoints": "points",
    "int": "count",
    "num": "ratio",
    "share": "%",
    "gb": "GB",
}
# perplexities from this size on in 3 significant digits (1.2e+15, not 16 digits and 2 decimals)
PPL_SCIENTIFIC = 1e6
# A column's 95% confidence half-width over seeds (`<column>_ci95`, Student t; paired by seed for a
# gain over tied) is shown as "±" in the column's own format.
CI_FORMAT = {
    "loss": "±{:.4f}",
    "dloss": "±{:.4f}",
    "ppl": "±{:.2f}",
    "pct": "±{:.2f}%",
    "points": "±{:.1f}",
    "dpoints": "±{:.1f}",
    "num": "±{:.4g}",
    "int": "±{:,.0f}",
    "share": "±{:.1f}%",
    "gb": "±{:.2f} GB",
}
# The Markdown and LaTeX renderings mark values computed on offline stand-in data (the table's
# STAND_IN_COLUMN) with STAND_IN_MARK and say why.
STAND_IN_MARK = "\u2020"
STAND_IN_NOTE = (
    f"{STAND_IN_MARK} computed on the offline stand-in data (workflow/resources/smoke/, a few "
    "hand-written examples that check the pipeline runs): not the benchmark, not comparable "
    "to the paper's figures."
)
# characters reStructuredText reads as markup inline (emphasis, literals, references, substitutions)
RST_MARKUP = "\\*`_|"
CI_NOTE = (
    f"`*{CI_SUFFIX}` columns: the 95% confidence half-width over seeds (Student t; paired by seed "
    "for a gain over tied)."
)
STAND_IN_KEY = "stand_in"  # DVC metrics computed on offline stand-in data sit under this key


def format_value(value: Any, column_format: str) -> str:
    """A number as its column's format (a FORMATS key, `ci_` for its CI) shows it ("-" where
    it is missing)."""
    if missing(value):
        return "-"
    ci = column_format.startswith("ci_")
    base = column_format.removeprefix("ci_")
    if (
        base == "ppl" and abs(value) >= PPL_SCIENTIFIC
    ):  # e.g. a rare word's, e^(sum of its tokens' losses)
        return ("±" if ci else "") + f"{value:.3g}"
    fmt = CI_FORMAT[base] if ci else FORMATS[base]
    return fmt.format(SCALE.get(base, 1.0) * value)


def _label(value: Any) -> Any:
    if missing(value):
        return "-"
    return int(value) if isinstance(value, float) and value.is_integer() else value


def rendered(table: Table, frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as text for Markdown/LaTeX (the CSV keeps full precision); values computed on
    stand-in data carry STAND_IN_MARK."""
    out = frame.drop(columns=["row", STAND_IN_COLUMN], errors="ignore").copy().astype(object)
    for col in table.label_columns:  # an empty label (e.g. the paper's row) as "-", counts as ints
        # an empty recipe is the scale's default: blank
        out[col] = [
            "" if col in BLANK_LABELS and (missing(v) or v == "") else _label(v) for v in out[col]
        ]
    marked = stand_in_rows(frame)
    per_row = list(frame[ROW_FORMAT]) if ROW_FORMAT in table.label_columns else []
    for col, column_format in table.columns.items():
        formats = [f if f in FORMATS else column_format for f in per_row] or [column_format] * len(
            frame
        )
        out[col] = [
            format_value(v, f) + (STAND_IN_MARK if col in m and format_value(v, f) != "-" else "")
            for v, m, f in zip(frame[col], marked, formats, strict=True)
        ]
    if per_row:
        out[ROW_FORMAT] = [UNITS.get(f, "-") if isinstance(f, str) else "-" for f in per_row]
    return out


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text: str) -> str:
    """Text for LaTeX: special characters escaped, >= and <= as math (no OT1 font surprises)."""
    out = "".join(_TEX_SPECIAL.get(ch, ch) for ch in str(text))
    return (
        out.replace(">=", r"$\geq$")
        .replace("<=", r"$\leq$")
        .replace(">", r"$>$")
        .replace("<", r"$<$")
    )


def _smoke_banner(table: Table, frame: pd.DataFrame) -> str:
    """The smoke-test statement of a table with smoke-test rows ("" if none)."""
    n = sum(smoke_rows(frame))
    if not n:
        return ""
    return f"SMOKE TEST: {n} of {len(frame)} row(s) are not evidence. {table.smoke_note}"


def _latex(table: Table, text: pd.DataFrame, stand_in: bool, smoke: str) -> str:
    escaped = text.map(tex_escape).rename(columns=tex_escape)
    body = escaped.to_latex(
        index=False,
        escape=False,
        column_format="l" * len(table.label_columns) + "r" * len(table.columns),
    )
    caption = tex_escape(" ".join(filter(None, [smoke, table.title])))
    caption += " " + tex_escape(STAND_IN_NOTE) if stand_in else ""
    return (
        "\\begin{table}[t]\n\\centering\n\\small\n"
        f"\\caption{{{caption}}}\n\\label{{tab:{table.name.replace('_', '-')}}}\n"
        f"{body}\\end{{table}}\n"
    )


def _markdown(table: Table, text: pd.DataFrame, stand_in: bool, smoke: str) -> str:
    note = f"Values from {table.source}; `-`: not applicable or not run. Full precision: the CSV."
    if stand_in:
        note = f"**{STAND_IN_NOTE}**\n\n{note}"
    head = f"# {table.title}\n\n" + (f"**{smoke}**\n\n" if smoke else "")
    return f"{head}{text.to_markdown(index=False, disable_numparse=True)}\n\n{note}\n"


def caption_rst(paragraphs: Sequence[str]) -> str:
    """A caption for Snakemake's report(): the paragraphs as plain reStructuredText (markup
    characters escaped), kept from Snakemake's Jinja templating (which reads `{{`, `{%`)."""
    text = "\n\n".join(
        "".join(f"\\{c}" if c in RST_MARKUP else c for c in p) for p in paragraphs if p
    )
    return f"{{% raw %}}\n{text}\n{{% endraw %}}\n"


def _caption(table: Table, stand_in: bool, smoke: str) -> str:
    return caption_rst(
        [
            smoke,
            table.title,
            STAND_IN_NOTE if stand_in else "",
            CI_NOTE if any(c.endswith(CI_SUFFIX) for c in table.columns) else "",
            f"Values from {table.source}; full precision: the CSV.",
        ]
    )


def dvc_metrics(table: Table, frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The metrics table as one document per cell (row id -> document), each one row of
    `dvc metrics show`: what it rests on (`evidence`: smoke test or full run, `train_tokens`), then
    its numbers; those computed on offline stand-in data under `stand_in.` (so the column says
    so), empty values left out."""
    columns = [c for c in frame.columns if c in table.columns]  # (manifests sort their keys)
    out: dict[str, dict[str, Any]] = {}
    for record, stand_in in zip(frame.to_dict("records"), stand_in_rows(frame), strict=True):
        doc: dict[str, Any] = {
            "evidence": record["evidence"],
            "train_tokens": int(str(record["train_tokens"]).replace(",", "")),
        }
        if not missing(record.get(RECIPE)) and record[RECIPE]:  # blank: the default recipe
            doc[RECIPE] = str(record[RECIPE])
        for col in columns:
            if not missing(record[col]):
                where = doc.setdefault(STAND_IN_KEY, {}) if col in stand_in else doc
                where[col] = float(record[col])
        out[str(record["row"])] = doc
    return out


def _json(table: Table, frame: pd.DataFrame) -> str:
    """{row: its DVC metrics document} (`dvc_metrics`): the per-cell files, in one file."""
    return json.dumps(dvc_metrics(table, frame), indent=2, sort_keys=False) + "\n"


def render(table: Table, frame: pd.DataFrame, fmt: str) -> str:
    """The Markdown ("md"), LaTeX ("tex"), caption ("rst") or, for the metrics table, JSON
    ("json") text of a table's frame (as read from its CSV)."""
    if fmt == "json":
        return _json(table, frame)
    stand_in = any(stand_in_rows(frame))
    smoke = _smoke_banner(table, frame)
    if fmt == CAPTION_FORMAT:
        return _caption(table, stand_in, smoke)
    text = rendered(table, frame)
    return (_markdown if fmt == "md" else _latex)(table, text, stand_in, smoke)

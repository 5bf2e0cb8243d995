"""Table building at a paper scale: our rows meet the paper's reported numbers (evaluation files
written here)."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from docutils.core import publish_parts
from jinja2 import Environment
from report_cells import CORPUS, RESULTS, TOKENS, VAL_TARGETS, write_cell, write_sample_efficiency

from leviathan import layout
from leviathan.anchor import ChangedArtifact
from leviathan.cells import Cell
from leviathan.manifest import read_manifest
from leviathan.model import build_model, model_config
from leviathan.report.audit import Auditor
from leviathan.report.build import PAPER_CHECK, PAPER_CHECK_TITLE, write_report
from leviathan.report.cellmap import DocumentCache
from leviathan.report.context import ReportInputs
from leviathan.report.paper import Paper, reported_path
from leviathan.report.registry import build_tables, table_names


@pytest.fixture
def at_200m(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReportInputs:
    monkeypatch.chdir(tmp_path)
    study = {
        "scales": ["200m"],
        "vocabs": ["o200k_base"],
        "variants": ["leviathan", "tied"],
        "seeds": [0],
    }
    for variant in ("tied", "leviathan"):
        write_cell(Cell("200m", "o200k_base", variant, 0, RESULTS))
    write_sample_efficiency("200m", "o200k_base")
    return ReportInputs({"main": study}, RESULTS, ["val"], str(reported_path()))


def test_our_rows_meet_the_papers_numbers(at_200m: ReportInputs) -> None:
    tables = build_tables(at_200m, DocumentCache())
    assert (
        list(tables)
        == table_names(at_200m)
        == [
            "main",
            "frequency",
            "sample_efficiency",
            "cost",
            "throughput",
            "paper_vs_ours",
            "metrics",
        ]
    )
    main = tables["main"].frame(DocumentCache()).set_index("row")
    assert list(main.index) == ["200m/o200k_base/tied", "200m/o200k_base/leviathan"]  # tied first
    lev = main.loc["200m/o200k_base/leviathan"]
    assert lev["val_ppl"] == pytest.approx(math.exp(3.0))
    assert lev["val_targets"] == VAL_TARGETS["leviathan"]  # the tokens the loss rests on
    # one sign convention: a gain is positive when leviathan is better, the paper's PPL change
    # (negative = better) shown as that gain
    assert lev["val_ppl_gain"] == pytest.approx(1 - math.exp(3.0) / math.exp(3.1))
    assert lev["val_ppl_gain"] > 0
    paper = Paper.load().main("200m")["leviathan"]
    assert lev["paper_val_ppl_gain"] == -paper["val_ppl_change"] > 0
    assert lev["paper_val_loss"] == paper["val_loss"]
    assert math.isnan(main.loc["200m/o200k_base/tied", "val_ppl_gain"])
    assert (lev["train_tokens"], lev["evidence"]) == ("4,200,000,000", "full run")

    pvo = tables["paper_vs_ours"].frame(DocumentCache()).set_index("row")
    row = pvo.loc["main/200m/leviathan/val_loss"]
    assert row["ours"] == 3.0
    assert row["difference"] == pytest.approx(3.0 - 3.052)
    assert math.isnan(pvo.loc["main/400m/leviathan/val_loss", "ours"])  # not trained here

    # the cost table against counts of its own: the parameters of the built models (the
    # cells' recorded configs) and tied's forward FLOPs per token by docs/usage.md's convention
    # (2 per multiply-accumulate; per layer q, k, v, o 4 D^2, SwiGLU 3 D F, attention 4 T D;
    # the head D V; the lookup free) at 200m's D 768, L 7, F 2048, o200k's V 200,019, T 512
    cost = tables["cost"].frame(DocumentCache()).set_index("row")
    built = {
        v: build_model(model_config("200m", "o200k_base", v), device="meta")
        for v in ("tied", "leviathan")
    }
    n_params = {v: sum(p.numel() for p in model.parameters()) for v, model in built.items()}
    for variant in ("tied", "leviathan"):
        assert cost.loc[f"200m/o200k_base/{variant}", "params"] == n_params[variant]
    assert cost.loc["200m/o200k_base/leviathan", "params_overhead"] == pytest.approx(
        n_params["leviathan"] / n_params["tied"] - 1
    )
    d, layers, ffn, vocab, t = 768, 7, 2048, 200_019, 512
    flops = 2 * (layers * (4 * d * d + 3 * d * ffn) + d * vocab) + layers * 4 * t * d
    assert cost.loc["200m/o200k_base/tied", "forward_flops_per_token"] == flops

    freq = tables["frequency"].frame(DocumentCache()).set_index("row")
    assert freq.loc["200m/o200k_base/1-9", "loss_gain_nats"] == pytest.approx(0.1)
    assert math.isnan(freq.loc["200m/o200k_base/10-99", "tied_loss"])  # empty bucket: no number
    word = freq.loc["200m/o200k_base/words/0"]  # the word-level buckets of the evaluation
    assert (word["level"], word["targets"]) == ("word", 4)
    assert word["ppl_gain"] == pytest.approx(1 - math.exp(5.0) / math.exp(5.1))

    # ours: tied's final periodic loss 3.1 is reached between leviathan's 3.4 (1/3 of the
    # tokens) and 3.05 (2/3), linearly: np.interp on the decreasing curve, reversed
    se = tables["sample_efficiency"].frame(DocumentCache()).set_index("row")
    row = se.loc["200m/o200k_base/leviathan"]
    xs = [TOKENS / 3, 2 * TOKENS / 3]
    reach = float(np.interp(3.1, [3.05, 3.4], xs[::-1]))
    assert row["tokens_to_target"] == pytest.approx(reach)
    assert row["reached"] == 1.0
    assert row["tokens_ratio"] == pytest.approx(TOKENS / reach)
    assert math.isnan(row["paper_tokens_ratio"])  # the paper's 2.1x is at 1.2b, not beside 200m


def test_write_report_renders_every_format(at_200m: ReportInputs, tmp_path: Path) -> None:
    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    written = write_report(config, "tables", None)
    assert {p.name for p in written} >= {"main.csv", "main.md", "main.tex", "paper_check.md"}
    md = Path("tables/main.md").read_text()
    assert "| 200m " in md
    assert "3.0520" in md  # the paper's loss beside ours, rounded for reading
    assert "SMOKE" not in md
    assert "positive = better" in md
    tex = Path("tables/main.tex").read_text()
    assert "\\label{tab:main}" in tex
    assert "val\\_ppl\\_gain" in tex
    assert "\\%" in tex
    assert pd.read_csv("tables/main.csv")["val_loss"].tolist() == [3.1, 3.0]  # full precision
    # each rendering is its CSV rendered, as the audit re-renders it (empty labels included)
    for name in ("main", "metrics", "cost", "throughput", "paper_vs_ours"):
        for fmt in ("md", "tex", "rst"):
            auditor = Auditor(Path.cwd())
            auditor.audit_table(f"tables/{name}.{fmt}")
            assert not [f.detail for f in auditor.failures if "rendered" in f.detail], (name, fmt)


def _as_the_html_report_shows(caption: Path) -> str:
    """A caption file's text as Snakemake's report() shows it: its Jinja template rendered, then
    the reStructuredText (docutils), tags stripped."""
    body = publish_parts(
        Environment().from_string(caption.read_text()).render(), writer_name="html"
    )
    assert "system-message" not in body["body"], body["body"]  # docutils found no markup error
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body["body"])).split())


def test_each_tables_caption_is_its_description(at_200m: ReportInputs) -> None:
    """The HTML report's caption of a table is the description its code gives it (the title its
    Markdown opens with), written with the table: there is no second copy to keep in step."""
    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    write_report(config, "tables", None)
    for name in table_names(at_200m):
        title = read_manifest(Path(f"tables/{name}.csv"))["config"]["title"]
        shown = _as_the_html_report_shows(Path(f"tables/{name}.rst"))
        assert " ".join(title.split()) in shown, name
        assert Path(f"tables/{name}.md").read_text().startswith(f"# {title}\n"), name
    assert "*_ci95" not in Path("tables/main.rst").read_text()  # one seed: no CI note
    paper_check = _as_the_html_report_shows(Path(f"tables/{PAPER_CHECK}.rst"))
    assert PAPER_CHECK_TITLE in paper_check and "*_gain" in paper_check  # markup kept as text


def test_metrics_table_is_per_cell_with_gains_over_tied_and_renders_flat_json(
    at_200m: ReportInputs,
) -> None:
    metrics = build_tables(at_200m, DocumentCache())["metrics"]
    frame = metrics.frame(DocumentCache()).set_index("row")
    assert list(frame.index) == ["200m/o200k_base/tied/seed0", "200m/o200k_base/leviathan/seed0"]
    lev = frame.loc["200m/o200k_base/leviathan/seed0"]
    assert lev["val_loss"] == 3.0
    assert lev["val_ppl"] == pytest.approx(math.exp(3.0))
    assert lev["val_bpb"] == 0.75
    assert lev["val_loss_gain"] == pytest.approx((3.1 - 3.0) / 3.1)
    assert lev["val_targets"] == VAL_TARGETS["leviathan"]
    assert "wikitext_ppl" not in frame.columns  # WikiText did not run in this config
    # every number traces to its file and field, like any table's
    assert {c["column"] for c in metrics.cell_map() if c["row"].endswith("leviathan/seed0")} >= {
        "val_loss",
        "val_loss_gain",
    }
    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    write_report(config, "tables", None)
    doc = json.loads(Path("tables/metrics.json").read_text())
    assert doc["200m/o200k_base/leviathan/seed0"]["val_loss_gain"] == pytest.approx(
        (3.1 - 3.0) / 3.1
    )
    assert (
        "val_loss_gain" not in doc["200m/o200k_base/tied/seed0"]
    )  # no number for tied's gain over itself

    # the audit holds the JSON to its CSV, as it holds Markdown and LaTeX renderings
    def json_findings() -> list[str]:
        auditor = Auditor(Path.cwd())
        auditor.audit_table("tables/metrics.json")
        return [f.detail for f in auditor.failures if f.what.endswith("metrics.json")]

    assert json_findings() == []
    Path("tables/metrics.json").write_text(
        json.dumps({**doc, "200m/o200k_base/tied/seed0": {"val_loss": 2.0}})
    )
    assert any("edited" in d for d in json_findings())


def test_paper_vs_ours_lists_the_tables_paper_cells_and_the_audit_checks_every_table(
    at_200m: ReportInputs,
) -> None:
    tables = build_tables(at_200m, DocumentCache())
    pvo = tables["paper_vs_ours"]
    compared = 0
    for (row, column), spec in pvo.specs.items():
        labels = pvo.rows[row]
        if column != "paper" or labels["table"] not in tables:
            continue
        ours = f"{labels['scale']}/o200k_base/{labels['variant']}"
        if ours in tables[labels["table"]].rows:  # the same number, the same source
            assert tables[labels["table"]].specs[ours, f"paper_{labels['quantity']}"] == spec
            compared += 1
    assert compared == 7  # main at 200m: 2 numbers of tied, 5 of leviathan
    assert "ablation/400m/untied/params" in pvo.rows  # every scale the paper reports

    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    write_report(config, "tables", None)
    # every number recomputed from its sources (the fixture's checkpoints have no manifests: the
    # chain below them is the end-to-end tests'), the metrics table (the per-cell summary) included
    for name in table_names(at_200m):
        auditor = Auditor(Path.cwd())
        auditor.audit_table(f"tables/{name}.csv")
        numbers = [f for f in auditor.findings if f.what.startswith(f"{name}.csv [")]
        assert numbers, (name, [f.line() for f in numbers])
        assert all(f.ok for f in numbers), (name, [f.line() for f in numbers])


def test_swapped_or_edited_evaluations_are_refused_by_the_report(at_200m: ReportInputs) -> None:
    """The report builds on an evaluation only as its evaluation wrote it, and only in the row of
    the cell whose checkpoint it evaluated."""
    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    tied, lev = (
        Path(layout.eval_output(Cell("200m", "o200k_base", v, 0, RESULTS), "val"))
        for v in ("tied", "leviathan")
    )
    original = {p: (p.read_bytes(), Path(f"{p}.json").read_bytes()) for p in (tied, lev)}
    for a, b in ((tied, lev), (lev, tied)):  # each with its own manifest: only the cell differs
        b.write_bytes(original[a][0])
        Path(f"{b}.json").write_bytes(original[a][1])
    with pytest.raises(ChangedArtifact, match=r"evaluates the checkpoint of cell 200m/o200k_base/"):
        write_report(config, "tables", None)
    for p, (doc, manifest) in original.items():
        p.write_bytes(doc)
        Path(f"{p}.json").write_bytes(manifest)
    lev.write_bytes(original[lev][0].replace(b'"loss": 3.0', b'"loss": 2.5'))
    with pytest.raises(ChangedArtifact, match=r"leviathan/seed0/val\.json: sha256 .* its manifest"):
        write_report(config, "tables", None)


def test_every_gain_reads_in_percent_and_the_papers_change_sign_is_explained(
    at_200m: ReportInputs,
) -> None:
    """One unit for relative gains: each table's Markdown shows them in %, paper_vs_ours too (each
    row in its own table's format; the CSVs hold fractions), and paper_check explains the sign of
    the paper's own PPL change beside the report's gains."""
    config = {"studies": dict(at_200m.studies), "evaluate": {"val": {}}, "corpus": CORPUS}
    write_report(config, "tables", None)
    pvo = pd.read_csv("tables/paper_vs_ours.csv").set_index("row")
    gain = pvo.loc["main/200m/leviathan/val_ppl_gain"]
    paper = Paper.load().main("200m")["leviathan"]["val_ppl_change"]
    assert gain["paper"] == pytest.approx(-paper) and gain["unit"] == "pct"  # a fraction
    md = Path("tables/paper_vs_ours.md").read_text()
    line = next(x for x in md.splitlines() if "| val_ppl_gain " in x and "| 200m " in x)
    assert f"{-100 * paper:+.2f}%" in line  # as main.md shows it, not 0.021
    main = Path("tables/main.md").read_text()
    assert f"{-100 * paper:+.2f}%" in main
    loss = next(x for x in md.splitlines() if "| val_loss " in x and "| 200m    | leviathan" in x)
    assert "| nats " in loss and "3.0520" in loss
    check = pd.read_csv("tables/paper_check.csv")
    change = check[check["what"].str.startswith("200m: leviathan val PPL change")].iloc[0]
    assert change["reported"] == paper and change["unit"] == "%"
    text = Path("tables/paper_check.md").read_text()
    assert "negative = better, the opposite sign of the report's *_gain columns" in text
    row = next(x for x in text.splitlines() if x.startswith("| 200m: leviathan val PPL change"))
    assert f" {100 * paper:.4g} " in row and "| %" in row  # in % there too


def test_a_tagged_cells_gains_are_against_tied_on_its_recipe_or_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`leviathan@lr1e-3` is compared with `tied@lr1e-3` where the study has it; without it, with
    the default tied, its row's `baseline` saying the recipes differ."""
    monkeypatch.chdir(tmp_path)
    cells = {
        "tied": 3.10,
        "leviathan": 3.00,
        "leviathan@lr1e-3": 2.90,
        "tied@lr1e-3": 2.95,
    }
    for variant, loss in cells.items():
        base = variant.partition("@")[0]
        write_cell(Cell("200m", "o200k_base", variant, 0, RESULTS), loss=loss, base=base)

    def main_of(variants: list[str]) -> pd.DataFrame:
        study = {"scales": ["200m"], "vocabs": ["o200k_base"], "variants": variants, "seeds": [0]}
        inp = ReportInputs({"main": study}, RESULTS, ["val"], str(reported_path()))
        tables = build_tables(inp, DocumentCache())
        return tables["main"].frame(DocumentCache()).set_index("row")

    lev = main_of(["tied", "leviathan", "leviathan@lr1e-3", "tied@lr1e-3"]).loc[
        "200m/o200k_base/leviathan@lr1e-3"
    ]
    assert lev["baseline"] == "tied@lr1e-3"
    assert lev["val_ppl_gain"] == pytest.approx(1 - math.exp(2.90) / math.exp(2.95))
    main = main_of(["tied", "leviathan", "leviathan@lr1e-3"])
    lev = main.loc["200m/o200k_base/leviathan@lr1e-3"]
    assert lev["baseline"] == "tied (other recipe: the study has no tied@lr1e-3)"
    assert lev["val_ppl_gain"] == pytest.approx(1 - math.exp(2.90) / math.exp(3.10))
    assert main.loc["200m/o200k_base/leviathan", "baseline"] == "tied"
    assert (
        pd.isna(main.loc["200m/o200k_base/tied", "baseline"])
        or not main.loc["200m/o200k_base/tied", "baseline"]
    )
    # a sweep's study of its own name: its cells are in the tables the README names for it
    study = {"scales": ["200m"], "vocabs": ["o200k_base"], "seeds": [0]}
    study["variants"] = ["tied", "leviathan@lr1e-3"]
    inp = ReportInputs({"sweep": study}, RESULTS, ["val"], str(reported_path()))
    tables = build_tables(inp, DocumentCache())
    assert "main" not in tables
    for name, row in [
        ("metrics", "200m/o200k_base/leviathan@lr1e-3/seed0"),
        ("cost", "200m/o200k_base/leviathan@lr1e-3"),
        ("throughput", "200m/o200k_base/leviathan@lr1e-3/seed0"),
        ("sample_efficiency", "200m/o200k_base/leviathan@lr1e-3"),
    ]:
        assert row in tables[name].rows, name
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "`metrics`, `cost`, `throughput` and `sample_efficiency` list every cell" in readme

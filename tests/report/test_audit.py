"""The cell map (how a table number is computed) and the audit walk, on a small chain of real files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from leviathan.anchor import ChangedArtifact, check_report_input
from leviathan.eval.results import write_result
from leviathan.io import sha256_file, write_json
from leviathan.manifest import input_record, write_manifest
from leviathan.report.audit import Auditor
from leviathan.report.build import write_table
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec, compute, resolve_pointer
from leviathan.report.table import Table


def test_pointer_walks_dicts_lists_and_escapes() -> None:
    doc = {"a": [{"b/c": {"m~n": 3}}], "acc,none": 0.5}
    assert resolve_pointer(doc, "/a/0/b~1c/m~0n") == 3
    assert resolve_pointer(doc, "/acc,none") == 0.5
    with pytest.raises(KeyError, match="missing"):
        resolve_pointer(doc, "/a/0/missing")


def test_ops_compute_from_the_files(tmp_path: Path) -> None:
    write_json(tmp_path / "tied.json", {"loss": 3.0})
    write_json(tmp_path / "lev0.json", {"loss": 2.8})
    write_json(tmp_path / "lev1.json", {"loss": 2.9})
    docs = DocumentCache(tmp_path)
    tied = (Source("tied.json", "/loss", "a"),)
    lev = (Source("lev0.json", "/loss", "b"), Source("lev1.json", "/loss", "b"))
    assert compute(ValueSpec("mean", tied), docs) == 3.0
    assert compute(
        ValueSpec("mean", tuple(Source(s.path, s.pointer) for s in lev)), docs
    ) == pytest.approx(2.85)
    assert compute(ValueSpec("gain", tied + lev), docs) == pytest.approx((3.0 - 2.85) / 3.0)
    assert compute(ValueSpec("exp_gain", tied + lev), docs) == pytest.approx(
        1 - math.exp(2.85) / math.exp(3.0)
    )
    a, b = ValueSpec("mean", tied), ValueSpec("mean", (Source("lev0.json", "/loss"),))
    assert compute(ValueSpec("diff_of", parts=(a, b)), docs) == pytest.approx(-0.2)
    assert compute(ValueSpec("ratio_of", parts=(a, b)), docs) == pytest.approx(2.8 / 3.0)
    both = tuple(Source(s.path, s.pointer) for s in tied + lev)  # 3.0, 2.8, 2.9
    assert compute(ValueSpec("median", both), docs) == 2.9
    assert compute(ValueSpec("max", both), docs) == 3.0
    assert compute(ValueSpec("sum", both), docs) == pytest.approx(8.7)
    assert math.isnan(compute(ValueSpec("mean", ()), docs))
    with pytest.raises(ValueError, match="unknown cell op"):
        compute(ValueSpec("mode", tied), docs)


def _chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """corpus -> shard -> evaluation JSON -> table, each link recording its input's sha256."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    Path("data/corpus.txt").write_text("some text\n")
    write_manifest("data/corpus.txt", artifact_type="corpus")
    Path("data/shard.bin").write_bytes(bytes(range(64)))
    write_manifest(
        "data/shard.bin", artifact_type="tokens", inputs=[input_record("data/corpus.txt")]
    )
    overall = {"loss": 2.5, "targets": 1000, "total_nats": 2500.0, "perplexity": math.exp(2.5)}
    evaluation = {
        "kind": "val",
        "checkpoint": None,
        "code": {"git_commit": None},
        "inputs": [{"role": "val_tokens", **input_record("data/shard.bin")}],
        "results": {"overall": overall},
    }
    write_result("val.json", evaluation)  # with its manifest, as an evaluation writes it
    return _demo_table(DocumentCache(check=check_report_input))


def _demo_table(docs: DocumentCache) -> Path:
    """The demo table of val.json, written as the report writes it (`docs`: how it reads)."""
    table = Table("demo", "Demo", ["variant"], {"val_loss": "loss", "val_ppl": "ppl"})
    row = table.add_row("micro/leviathan", variant="leviathan")
    table.set(row, "val_loss", ValueSpec("mean", (Source("val.json", "/results/overall/loss"),)))
    table.set(row, "val_ppl", ValueSpec("exp", (Source("val.json", "/results/overall/loss"),)))
    table.add_row("micro/tied", variant="tied")  # not run: its cells are empty, with no sources
    paths = write_table(table, docs, "tables")
    return paths["csv"]


def _audit(table: str | Path, cell: tuple[str, str] | None = None) -> Auditor:
    auditor = Auditor(Path.cwd())
    auditor.audit_table(table, cell)
    return auditor


def test_audit_passes_then_names_the_tampered_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = _chain(tmp_path, monkeypatch)
    assert pd.read_csv(csv)["val_ppl"][0] == pytest.approx(math.exp(2.5))
    clean = _audit(csv)
    assert not clean.failures, [f.line() for f in clean.failures]
    walked = {f.what for f in clean.findings}
    assert {"data/shard.bin", "data/corpus.txt", "val.json"} <= walked
    assert not _audit("tables/demo.md", ("micro/leviathan", "val_ppl")).failures

    # an edited shard: its own manifest and the evaluation that read it disagree with it
    original = Path("data/shard.bin").read_bytes()
    Path("data/shard.bin").write_bytes(original[:-1] + b"\x00")
    bad = _audit(csv, ("micro/leviathan", "val_loss"))
    assert [f.what for f in bad.failures] == ["data/shard.bin"]
    assert "recorded in val.json" in bad.failures[0].detail
    Path("data/shard.bin").write_bytes(original)

    # a hand-edited number: the table's hash and the recomputed value both say so
    text = csv.read_text()
    csv.write_text(text.replace("2.5,", "2.4,", 1))
    bad = _audit(csv)
    details = " ".join(f.detail for f in bad.failures)
    assert "tables/demo.csv" in {f.what for f in bad.failures}
    assert "the table says 2.4 but its sources give 2.5" in details
    csv.write_text(text)

    # a number edited in the Markdown, its manifest's hash updated to match: still not the CSV rendered
    md = Path("tables/demo.md")
    md_text = md.read_text()
    md.write_text(md_text.replace("2.5000", "2.4000"))
    manifest = json.loads(Path("tables/demo.md.json").read_text())
    manifest["artifact"]["sha256"] = sha256_file(md)
    write_json("tables/demo.md.json", manifest)
    bad = _audit(md)
    assert [f.detail for f in bad.failures] == ["is not tables/demo.csv rendered: it was edited"]
    md.write_text(md_text)

    # an edited evaluation output: the table recorded another sha256 for it
    doc = json.loads(Path("val.json").read_text())
    doc["results"]["overall"]["loss"] = 2.0
    write_json("val.json", doc)
    bad = _audit(csv)
    failed = {f.what: f.detail for f in bad.failures}
    assert "recorded in tables/demo.csv.json" in failed["val.json"]
    assert sha256_file("val.json")[:12] in failed["val.json"]


def test_an_edited_evaluation_is_refused_by_the_report_and_fails_the_audit_once_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = _chain(tmp_path, monkeypatch)
    doc = json.loads(Path("val.json").read_text())
    doc["results"]["overall"]["loss"] = 2.0
    write_json("val.json", doc)
    with pytest.raises(ChangedArtifact, match=r"val\.json: sha256 .* its manifest val\.json\.json"):
        _demo_table(DocumentCache(check=check_report_input))
    # a table rebuilt from it without that check records the edited file's hash: the output's
    # own manifest still says what the evaluation wrote
    _demo_table(DocumentCache())
    failed = {f.what: f.detail for f in _audit(csv).failures}
    assert "recorded in its manifest val.json.json: the file changed" in failed["val.json"]
    assert "overall.perplexity is 12.18" in failed["val.json says of itself"]

    # its manifest rewritten too: the output contradicts its own sums
    write_result("val.json", doc)
    _demo_table(DocumentCache(check=check_report_input))
    failed = [f.detail for f in _audit(csv).failures if f.what == "val.json says of itself"]
    assert "overall.loss is 2.0, but its own sums give 2.5: it was edited" in failed
    doc["results"]["overall"].update(total_nats=2000.0, perplexity=math.exp(2.0))
    write_result("val.json", doc)  # ... and its sums as well: nothing left to contradict
    _demo_table(DocumentCache(check=check_report_input))
    assert not _audit(csv).failures

    # no manifest at all: nothing anchors it, for the report as for the audit
    Path("val.json.json").unlink()
    with pytest.raises(ChangedArtifact, match=r"val\.json: no manifest val\.json\.json"):
        _demo_table(DocumentCache(check=check_report_input))
    failed = {f.what: f.detail for f in _audit(csv).failures}
    assert failed["val.json"].startswith("no manifest val.json.json")


def test_a_number_in_an_empty_cell_is_caught_even_with_a_matching_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = _chain(tmp_path, monkeypatch)
    empty = _audit(csv, ("micro/tied", "val_loss"))
    assert not empty.failures
    assert "nothing to verify" in empty.findings[-1].detail
    frame = pd.read_csv(csv)
    frame.loc[frame["row"] == "micro/tied", "val_loss"] = 2.6
    frame.to_csv(csv, index=False)
    manifest = json.loads(Path(f"{csv}.json").read_text())
    manifest["artifact"]["sha256"] = sha256_file(csv)  # the forger updated the manifest too
    write_json(f"{csv}.json", manifest)
    bad = _audit(csv)
    assert [f.what for f in bad.failures] == ["demo.csv [micro/tied, val_loss]"]
    assert "has no recorded source" in bad.failures[0].detail


def test_unknown_cell_is_an_error_naming_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = _chain(tmp_path, monkeypatch)
    bad = _audit(csv, ("micro/untied", "val_loss"))
    assert bad.failures
    assert "no row 'micro/untied'" in bad.failures[0].detail
    assert "micro/leviathan" in bad.failures[0].detail
    bad = _audit(csv, ("micro/leviathan", "val_los"))
    assert bad.failures
    assert "no column 'val_los'" in bad.failures[0].detail

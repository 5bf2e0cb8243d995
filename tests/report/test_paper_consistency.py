import copy
import json
import math

import pytest

from leviathan.cli import main
from leviathan.report.paper import Paper
from leviathan.report.paper_consistency import consistency_checks


def test_flags_the_papers_known_inconsistency_and_only_real_ones() -> None:
    checks = {c.what: c for c in consistency_checks()}
    bad = next(c for w, c in checks.items() if w.startswith("1.2b leviathan: val PPL"))
    assert not bad.ok  # exp(2.402) = 11.05, reported 10.94
    assert bad.recomputed == pytest.approx(math.exp(2.402))
    assert bad.recomputed == pytest.approx(11.046, abs=1e-3)
    good = next(c for w, c in checks.items() if w.startswith("1.2b tied: val PPL"))
    assert good.ok  # exp(2.489) = 12.05


def test_a_consistent_paper_passes_and_an_edited_number_is_caught() -> None:
    loaded = Paper.load()
    doc = copy.deepcopy(dict(loaded.doc))
    paper = Paper(doc, loaded.path)
    for row in doc["main"].values():
        for variant in ("tied", "leviathan"):
            row[variant]["val_ppl"] = round(math.exp(row[variant]["val_loss"]), 2)
    checks = consistency_checks(paper)
    main_ppl = [c for c in checks if "val PPL = exp" in c.what]
    assert main_ppl
    assert all(c.ok for c in main_ppl)
    doc["ablation"]["400m"]["flat_mlp"]["gain"] = 0.02
    edited = next(c for c in consistency_checks(paper) if "ablation flat_mlp" in c.what)
    assert not edited.ok


def test_other_inconsistencies_of_the_reported_numbers_are_flagged() -> None:
    checks = {c.what: c for c in consistency_checks()}
    ppl_400m = next(c for w, c in checks.items() if w.startswith("400m: leviathan val PPL change"))
    assert not ppl_400m.ok
    assert ppl_400m.recomputed == pytest.approx(15.24 / 16.18 - 1)  # -5.8%, reported -5.6%
    down = next(c for w, c in checks.items() if "mean accuracy gain" in w)
    assert not down.ok
    assert down.recomputed == pytest.approx((1.5 + 3.9 + 0.4 + 2.2 + 3.0 + 0.8) / 6)


def test_paper_check_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "paper-check"]) == 0
    out = capsys.readouterr().out
    assert "[DIFF] 1.2b leviathan: val PPL = exp(val loss 2.402)" in out
    # a relative change in % as every table shows gains, its sign the paper's, said
    assert "negative = better): reported -5.6%, recomputed -5.81%" in out
    assert main(["report", "paper-check", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["ok"] for r in rows} == {True, False}


def test_the_papers_numbers_are_reached_by_scale() -> None:
    paper = Paper.load()
    assert paper.scales("main") == ["200m", "400m", "1.2b"]
    assert paper.scales("ablation") == ["400m"]
    assert paper.scales("downstream") == ["1.2b"]
    assert paper.ablation("400m")["untied"]["params"] == 611_000_000
    assert paper.ablation("1.2b") == {}  # not reported
    assert (
        paper.pointer("downstream", "1.2b", "mean_gain_points")
        == "/downstream/1.2b/mean_gain_points"
    )
    assert paper.pointer("downstream", "400m", "mean_gain_points") is None

"""Sample efficiency from training curves (the trainer's metrics.jsonl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leviathan.eval.errors import EvalInputError
from leviathan.eval.sample_efficiency import read_curve, sample_efficiency
from leviathan.train.metrics_log import MetricsLog, read_metrics


def write_run(
    run: Path, points: list[tuple[int, int, float]], *, vocab: str = "gpt2", variant: str = "tied"
) -> Path:
    """A run directory whose metrics.jsonl (the trainer's writer) holds these val points."""
    log = MetricsLog(run / "metrics.jsonl")
    log.write(
        {
            "kind": "start",
            "step": 0,
            "train_config": {"scale": "micro", "vocab": vocab, "variant": variant, "context": 64},
        }
    )
    for step, tokens, loss in points:
        log.write({"kind": "val", "step": step, "tokens": tokens, "val_loss": loss})
    log.close()
    return run


def test_tokens_to_reach_the_baseline_and_the_ratio(tmp_path: Path) -> None:
    base = write_run(
        tmp_path / "tied", [(1, 100, 5.0), (2, 200, 4.0), (3, 300, 3.5), (4, 400, 3.2)]
    )
    lev = write_run(
        tmp_path / "lev",
        [(1, 100, 5.5), (2, 200, 3.8), (3, 300, 3.1), (4, 400, 2.9)],
        variant="leviathan",
    )
    never = write_run(
        tmp_path / "never", [(1, 100, 6.0), (2, 200, 5.0), (4, 400, 3.3)], variant="untied"
    )
    out = sample_efficiency(base, [lev, never])
    r = out["results"]
    assert r["baseline"]["target_val_loss"] == 3.2
    assert r["baseline"]["tokens"] == 400
    a, b = r["runs"]
    assert a["reached"]
    assert a["tokens_to_target"] == 300
    assert a["ratio"] == pytest.approx(400 / 300)
    # between (200, 3.8) and (300, 3.1) the loss crosses 3.2 at 200 + 100 * 0.6 / 0.7
    assert a["tokens_interpolated"] == pytest.approx(200 + 100 * 0.6 / 0.7)
    assert a["trails_until_tokens"] == 100
    assert a["variant"] == "leviathan"
    assert not b["reached"]
    assert b["ratio"] is None
    assert b["trails_until_tokens"] == 400
    assert [i["role"] for i in out["inputs"]] == ["baseline", "run", "run"]


def test_resumed_runs_keep_the_last_record_of_a_step(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [(1, 100, 5.0), (2, 200, 4.5), (2, 200, 4.4), (3, 300, 4.0)])
    curve = read_curve(run)
    assert curve.tokens == (100, 200, 300)
    assert curve.losses == (5.0, 4.4, 4.0)


def test_incomparable_or_empty_runs_are_refused(tmp_path: Path) -> None:
    base = write_run(tmp_path / "tied", [(1, 100, 5.0)])
    other = write_run(tmp_path / "o200k", [(1, 100, 4.0)], vocab="o200k_base")
    with pytest.raises(EvalInputError, match="vocab"):
        sample_efficiency(base, [other])
    empty = write_run(tmp_path / "empty", [])
    with pytest.raises(EvalInputError, match="no validation records"):
        sample_efficiency(base, [empty])
    with pytest.raises(FileNotFoundError, match="no training metrics"):
        sample_efficiency(tmp_path / "missing", [base])


def test_on_real_training_curves(runs: dict[str, Path]) -> None:
    out = sample_efficiency(runs["tied"], [runs["leviathan"]])
    tied_val = read_metrics(runs["tied"] / "metrics.jsonl", "val")
    r = out["results"]
    assert r["baseline"]["target_val_loss"] == tied_val[-1]["val_loss"]
    (run,) = r["runs"]
    assert len(run["curve"]) == len(read_metrics(runs["leviathan"] / "metrics.jsonl", "val"))
    if run["reached"]:
        assert run["ratio"] == pytest.approx(r["baseline"]["tokens"] / run["tokens_to_target"])
    assert all("checkpoint_sha256" in i for i in out["inputs"])

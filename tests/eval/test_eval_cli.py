"""`leviathan eval ...` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from leviathan.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    rc = main(argv)
    cap = capsys.readouterr()
    lines = [line for line in cap.out.splitlines() if line.startswith("{")]
    return rc, (json.loads(lines[-1]) if lines else {}), cap.err


def test_val_with_word_counts(runs, small_val: Path, gpt2_shards: Path, tmp_path: Path, capsys) -> None:
    wc = tmp_path / "wc.json"
    rc, summary, _ = run(["eval", "word-counts", "--train", str(gpt2_shards / "train.bin"), "--val", str(small_val),
                          "--out", str(wc)], capsys)  # fmt: skip
    assert rc == 0 and summary["val_word_types"] > 0
    out = tmp_path / "val.json"
    rc, summary, _ = run(["eval", "val", "--checkpoint", str(runs["tied"]), "--val", str(small_val), "--counts",
                          str(gpt2_shards / "counts.npy"), "--word-counts", str(wc), "--device", "cpu",
                          "--quantile-bins", "4", "--out", str(out)], capsys)  # fmt: skip
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "val" and result["checkpoint"]["variant"] == "tied"
    assert summary["loss"] == result["results"]["overall"]["loss"]
    assert len(result["results"]["frequency_tokens"]["quantile"]) <= 4 and "frequency_words" in result["results"]


def test_wikitext_and_lm_eval_with_a_config_file(runs, task_files, tmp_path: Path, capsys) -> None:
    import datasets

    wiki = tmp_path / "wiki.parquet"
    datasets.Dataset.from_dict({"text": ["", " = Title = \n", "", " Some text about things .\n"] * 5}).to_parquet(str(wiki))
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(yaml.safe_dump({"eval": {
        "wikitext": {"data_files": {"test": str(wiki)}, "stride": 32},
        "lm_eval": {"tasks": ["piqa"], "data": {"piqa": {"data_files": task_files["piqa"]}}, "bootstrap_iters": 0},
    }}))  # fmt: skip
    out = tmp_path / "wikitext.json"
    rc, summary, _ = run(["eval", "wikitext", "--checkpoint", str(runs["leviathan"]), "--config", str(cfg),
                          "--device", "cpu", "--out", str(out)], capsys)  # fmt: skip
    assert rc == 0 and json.loads(out.read_text())["config"]["stride"] == 32 and summary["tokens"] > 0
    out = tmp_path / "lm_eval.json"
    rc, summary, _ = run(["eval", "lm-eval", "--checkpoint", str(runs["leviathan"]), "--config", str(cfg),
                          "--device", "cpu", "--out", str(out)], capsys)  # fmt: skip
    assert rc == 0 and set(summary["acc"]) == {"piqa"}
    assert Path(summary["samples"]).is_file() and json.loads(out.read_text())["results"]["samples"]["count"] == 3
    # --task-data on the command line instead of the config file
    rc, summary, _ = run(["eval", "lm-eval", "--checkpoint", str(runs["leviathan"]), "--tasks", "winogrande",
                          "--task-data", f"winogrande:validation={task_files['winogrande']['validation']}",
                          "--bootstrap-iters", "0", "--device", "cpu", "--out", str(tmp_path / "w.json")], capsys)  # fmt: skip
    assert rc == 0 and set(summary["acc"]) == {"winogrande"}


def test_sample_efficiency(runs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "se.json"
    rc, summary, _ = run(["eval", "sample-efficiency", "--baseline", str(runs["tied"]), "--run", str(runs["leviathan"]),
                          "--out", str(out)], capsys)  # fmt: skip
    assert rc == 0 and json.loads(out.read_text())["kind"] == "sample_efficiency"


def test_errors_are_messages_not_tracebacks(runs, small_val: Path, tmp_path: Path, capsys, unreachable_hub) -> None:
    rc, _, err = run(["eval", "val", "--checkpoint", str(tmp_path / "nope"), "--val", str(small_val),
                      "--out", str(tmp_path / "x.json")], capsys)  # fmt: skip
    assert rc == 2 and "not a checkpoint" in err and "Traceback" not in err
    rc, _, err = run(["eval", "lm-eval", "--checkpoint", str(runs["tied"]), "--tasks", "piqa", "--device", "cpu",
                      "--out", str(tmp_path / "x.json")], capsys)  # fmt: skip
    assert rc == 2 and "unreachable" in err and "--task-data" in err
    rc, _, err = run(["eval", "lm-eval", "--checkpoint", str(runs["tied"]), "--task-data", "piqa=x.jsonl",
                      "--out", str(tmp_path / "x.json")], capsys)  # fmt: skip
    assert rc == 2 and "TASK:SPLIT=FILE" in err
    assert not (tmp_path / "x.json").exists()

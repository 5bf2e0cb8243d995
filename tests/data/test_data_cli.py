"""`leviathan data ...` end to end through the real entry point (small local text)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from leviathan.cli import main


def _corpus_files(root: Path) -> Path:
    root.mkdir()
    for i in range(40):
        (root / f"doc{i:02d}.txt").write_text(f"Document {i}: the quick brown fox jumps. " * 20)
    return root


def test_fetch_tokenize_counts_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _corpus_files(tmp_path / "src")
    corpus, tokens = tmp_path / "corpus", tmp_path / "tokens"
    assert (
        main(
            [
                "data",
                "fetch",
                "text",
                "--out",
                str(corpus),
                str(src / "*.txt"),
                "--val-fraction",
                "0.2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "train.jsonl.zst" in out
    assert "0 undecodable characters replaced" in out
    assert (
        main(
            [
                "data",
                "tokenize",
                "--corpus",
                str(corpus),
                "--vocab",
                "gpt2",
                "--out",
                str(tokens),
                "--threads",
                "2",
                "--processes",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["splits"]) == {"train", "val"}
    assert summary["vocab"] == "gpt2"
    assert sorted(p.name for p in tokens.iterdir()) == [
        "counts.npy",
        "counts.npy.json",
        "train.bin",
        "train.bin.json",
        "val.bin",
        "val.bin.json",
    ]
    assert (
        main(
            ["data", "counts", "--bin", str(tokens / "train.bin"), "--out", str(tmp_path / "c.npy")]
        )
        == 0
    )
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.load(tokens / "counts.npy"))
    capsys.readouterr()
    assert main(["data", "inspect", str(tokens), "--verify", "--decode", "5"]) == 0
    report = capsys.readouterr().out
    assert report.count("sha256 ok") == 3
    assert "first 5 tokens: 'Document" in report


def test_vocab_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "vocab", "cl100k_base"]) == 0
    assert "[15339, 1917]" in capsys.readouterr().out


def test_user_errors_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["data", "fetch", "text", "--out", str(tmp_path / "c"), str(tmp_path / "none*.txt")])
        == 2
    )
    assert "matches no file" in capsys.readouterr().err
    assert (
        main(
            [
                "data",
                "tokenize",
                "--corpus",
                str(tmp_path),
                "--vocab",
                "bogus",
                "--out",
                str(tmp_path / "t"),
            ]
        )
        == 2
    )
    assert "unknown vocabulary 'bogus'" in capsys.readouterr().err
    assert main(["data", "inspect", str(tmp_path / "missing.bin")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_fetch_hf_split_syntax(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"body": f"row {i}"}) + "\n" for i in range(5)))
    assert (
        main(
            [
                "data",
                "fetch",
                "hf",
                "--out",
                str(tmp_path / "c"),
                "--dataset",
                "json",
                "--data-files",
                str(data),
                "--split",
                "test=train",
                "--text-field",
                "body",
                "--max-docs",
                "3",
            ]
        )
        == 0
    )
    assert "test.jsonl.zst: 3 documents" in capsys.readouterr().out


def test_data_batch_refuses_an_unknown_cell_and_a_step_past_the_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both refused in one line before any shard is read (none is needed to say so)."""
    from leviathan.cells import config_cells
    from leviathan.study.config import resolve
    from leviathan.study.resolve import cell_train_config

    config = resolve([])
    cell = config_cells(config)[0]
    last = cell_train_config(config, cell).max_steps
    unknown = f"{cell.scale}/{cell.vocab}/nosuchvariant/seed{cell.seed}"
    assert main(["data", "batch", "--cell", unknown, "--step", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"leviathan data: error: {unknown} is not a cell of the configured studies"
    )
    assert err.count("\n") == 1
    for step in (last + 1, 10**9):
        assert main(["data", "batch", "--cell", cell.key, "--step", str(step)]) == 2
        assert capsys.readouterr().err == (
            f"leviathan data: error: --step {step}: past the last step of {cell.key}, {last}; "
            f"give a step from 1 to {last}\n"
        )

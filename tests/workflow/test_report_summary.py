"""The summary table reads real evaluation outputs of a micro checkpoint trained here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from leviathan.eval.checkpoint import open_checkpoint
from leviathan.eval.config import WikitextConfig
from leviathan.eval.results import write_result
from leviathan.eval.validation import evaluate_val
from leviathan.eval.wikitext import evaluate_wikitext
from leviathan.report.summary import summary_table, write_summary
from leviathan.train.config import RuntimeConfig, train_config
from leviathan.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("summary")
    run = out / "run"
    train(train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 2), train_bins=[gpt2_shards / "train.bin"],
          val_bin=None, run_dir=run, runtime=RuntimeConfig(progress=False, ckpt_every=0))  # fmt: skip
    ckpt, model = open_checkpoint(run, device="cpu")
    val = write_result(out / "val.json", evaluate_val(ckpt, model, gpt2_shards / "val.bin"))
    wiki_cfg = WikitextConfig(data_files={"test": str(ROOT / "workflow/resources/smoke/wikitext_test.txt")})
    wiki = write_result(out / "wikitext.json", evaluate_wikitext(ckpt, model, wiki_cfg))
    return [val, wiki]


def test_summary_rows_come_from_the_results(results: list[Path], tmp_path: Path) -> None:
    import json

    frame = summary_table(results)
    assert len(frame) == 1
    row = frame.iloc[0]
    val = json.loads(results[0].read_text())
    wiki = json.loads(results[1].read_text())
    assert (row.scale, row.vocab, row.variant, row.seed) == ("micro", "gpt2", "leviathan", 0)
    assert row.val_loss == val["results"]["overall"]["loss"]
    assert row.wikitext_ppl == wiki["results"]["token_perplexity"]
    assert pd.isna(row.lm_eval_mean_acc)
    write_summary(frame, tmp_path / "s.csv", tmp_path / "s.md")
    assert pd.read_csv(tmp_path / "s.csv").val_loss.iloc[0] == pytest.approx(row.val_loss)
    assert "| micro" in (tmp_path / "s.md").read_text()


def test_results_of_different_checkpoints_for_one_cell_are_refused(results: list[Path], tmp_path: Path) -> None:
    import json

    other = json.loads(results[1].read_text())
    other["checkpoint"]["sha256"] = "0" * 64
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    with pytest.raises(ValueError, match="different checkpoint"):
        summary_table([results[0], path])

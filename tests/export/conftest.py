"""Export fixtures: Hub access off, the hf extra required, a micro run trained here."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# Nothing may come from the Hugging Face Hub (set before transformers is imported here;
# the subprocesses of the lm-eval test get it through their environment).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

pytest.importorskip(
    "transformers", reason="the hf extra is not installed: pip install -e '.[test,hf]'"
)

from leviathan.data.tokenizers import Tokenizer, VocabFileError, load_tokenizer  # noqa: E402
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config  # noqa: E402
from leviathan.train.trainer import train  # noqa: E402

VOCAB_NAMES = ("gpt2", "cl100k_base", "o200k_base")
QUIET = RuntimeConfig(
    progress=False,
    validation=ValidationConfig(every=0, windows=2),
    checkpoint=CheckpointConfig(every=0, keep_last=1),
)


@pytest.fixture(scope="session")
def tokenizer_of() -> Callable[[str], Tokenizer]:
    """tokenizer_of(name): the verified tiktoken vocabulary, or a skip saying why not."""

    def get(name: str) -> Tokenizer:
        try:
            return load_tokenizer(name)
        except VocabFileError as exc:
            pytest.skip(f"the {name} BPE file is not available offline here: {exc}")

    return get


@pytest.fixture(scope="session")
def micro_run(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A micro leviathan run (a few steps on the embedded corpus's gpt2 shards)."""
    run_dir = tmp_path_factory.mktemp("export_run") / "leviathan"
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 3)
    train(
        cfg,
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir=run_dir,
        runtime=QUIET,
    )
    return run_dir

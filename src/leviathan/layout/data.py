"""Where a study's data lives: corpus text, token shards, counts, the evaluations' datasets."""

from __future__ import annotations

from pathlib import Path

from leviathan.layout.base import PathLike

# ---------------------------------------------------------------- data
CORPUS_ROOT = "data/corpus"
TOKENS_ROOT = "data/tokens"
SPLITS = ("train", "val")
CORPUS_SUFFIX = ".jsonl.zst"
SHARD_SUFFIX = ".bin"
COUNTS = "counts.npy"  # per-id token counts of the train split
WORD_COUNTS = "word_counts.json"  # training-corpus counts of the validation text's words


def corpus_dir(corpus: str) -> str:
    return f"{CORPUS_ROOT}/{corpus}"


def corpus_file(directory: PathLike, split: str) -> Path:
    """One split of a corpus directory: `<directory>/<split>.jsonl.zst`."""
    return Path(directory) / f"{split}{CORPUS_SUFFIX}"


FETCH_STATE = ".fetch-state.json"  # a fetch in progress: its completed parts (resume point)
PARTIAL_SUFFIX = ".partial"  # a split being fetched: `.<split>.jsonl.zst.partial`


def fetch_state(directory: PathLike) -> Path:
    """Where an unfinished fetch records its last complete part (removed once done)."""
    return Path(directory) / FETCH_STATE


def partial_corpus_file(directory: PathLike, split: str) -> Path:
    """A split while it is fetched (whole parts up to the length its fetch state records)."""
    return Path(directory) / f".{split}{CORPUS_SUFFIX}{PARTIAL_SUFFIX}"


EVAL_DATA_ROOT = "data/eval"  # the evaluations' datasets, fetched by the data step
EVAL_DATA_SOURCE = "source.json"  # what a fetched dataset is and holds (written last)
EVAL_DATA_PROGRESS = ".fetched.json"  # its splits fetched so far (kept: a rerun skips them)


def eval_data_dir(key: str) -> Path:
    """One evaluation's fetched dataset (`key`: `wikitext` or `lm_eval/<task>`)."""
    return Path(EVAL_DATA_ROOT) / key


def eval_data_source(key: str) -> Path:
    return eval_data_dir(key) / EVAL_DATA_SOURCE


def eval_data_split(key: str, split: str) -> Path:
    """One split of a fetched dataset, in the official schema: `<dir>/<split>.parquet`."""
    return eval_data_dir(key) / f"{split}.parquet"


def tokens_dir(corpus: str, vocab: str) -> str:
    return f"{TOKENS_ROOT}/{corpus}/{vocab}"


def shard_path(directory: PathLike, split: str) -> Path:
    """One token shard of a tokens directory: `<directory>/<split>.bin`."""
    return Path(directory) / f"{split}{SHARD_SUFFIX}"


def shards(directory: str) -> dict[str, str]:
    """The token shards of a tokens directory, by split."""
    return {split: str(shard_path(directory, split)) for split in SPLITS}


def token_files(directory: str, word_counts: bool = False) -> dict[str, str]:
    """What tokenizing (and counting words) writes into a tokens directory, by role:
    train, val (the shards), counts and, with `word_counts`, word_counts."""
    files = shards(directory)
    files["counts"] = f"{directory}/{COUNTS}"
    if word_counts:
        files["word_counts"] = f"{directory}/{WORD_COUNTS}"
    return files


# what `leviathan.layout` exports from here: every public name (tests/test_layout.py)
__all__ = [
    "CORPUS_ROOT",
    "CORPUS_SUFFIX",
    "COUNTS",
    "EVAL_DATA_PROGRESS",
    "EVAL_DATA_ROOT",
    "EVAL_DATA_SOURCE",
    "FETCH_STATE",
    "PARTIAL_SUFFIX",
    "SHARD_SUFFIX",
    "SPLITS",
    "TOKENS_ROOT",
    "WORD_COUNTS",
    "corpus_dir",
    "corpus_file",
    "eval_data_dir",
    "eval_data_source",
    "eval_data_split",
    "fetch_state",
    "partial_corpus_file",
    "shard_path",
    "shards",
    "token_files",
    "tokens_dir",
]

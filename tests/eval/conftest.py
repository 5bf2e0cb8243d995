"""Evaluation fixtures: micro checkpoints trained here on the embedded corpus's gpt2 shards,
a small validation shard (whole documents of the real val split) and tiny local data files
of the six lm-eval tasks in their official schemas."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from leviathan.data.tokenizers import token_dtype
from leviathan.eval.checkpoint import Checkpoint, EvalModel, open_checkpoint
from leviathan.io import atomic_path
from leviathan.manifest import read_manifest, vocab_record, write_manifest
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.trainer import train
from leviathan.vocab import get_vocab

STEPS = 4
QUIET = RuntimeConfig(
    progress=False,
    validation=ValidationConfig(every=1, windows=4),
    checkpoint=CheckpointConfig(every=0, keep_last=1),
)


def write_shard(path: Path, tokens: Any, vocab: str = "gpt2", split: str = "val") -> Path:
    """A token shard with a real manifest (the data layer's writer)."""
    spec = get_vocab(vocab)
    dtype = token_dtype(spec.n_vocab)
    with atomic_path(path) as tmp:
        np.asarray(tokens, dtype=dtype).tofile(tmp)
    write_manifest(
        path,
        artifact_type="tokens",
        vocab=vocab_record(spec),
        fields={"split": split, "dtype": dtype.name, "tokens": int(len(tokens)), "documents": 1},
    )
    return path


def _train(shards: Path, run_dir: Path, variant: str) -> Path:
    cfg = train_config("micro", "gpt2", variant, total_tokens=8 * 64 * STEPS)
    train(
        cfg,
        train_bins=[shards / "train.bin"],
        val_bin=shards / "val.bin",
        run_dir=run_dir,
        runtime=QUIET,
    )
    return run_dir


@pytest.fixture(scope="session")
def runs(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Micro runs of the tied baseline and leviathan (a few steps each)."""
    root = tmp_path_factory.mktemp("eval_runs")
    return {v: _train(gpt2_shards, root / v, v) for v in ("tied", "leviathan")}


@pytest.fixture(scope="session")
def loaded(runs: dict[str, Path]) -> tuple[Checkpoint, EvalModel]:
    return open_checkpoint(runs["leviathan"], "cpu")


@pytest.fixture(scope="session")
def small_val(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first whole documents (~3k tokens) of the real val shard, as its own shard."""
    tokens = np.fromfile(gpt2_shards / "val.bin", dtype=np.uint16)
    eot = get_vocab("gpt2").eot_id
    ends = np.flatnonzero(tokens == eot)
    stop = int(ends[np.searchsorted(ends, 3000)]) + 1
    path = tmp_path_factory.mktemp("small_val") / "val.bin"
    write_shard(path, tokens[:stop])
    manifest = read_manifest(path)
    assert manifest["tokens"] == stop
    return path


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="session")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """A few documents per paper task, in the official Hub schema, as local JSONL files."""
    d = tmp_path_factory.mktemp("lm_eval_data")
    hellaswag = [
        {
            "ind": i,
            "activity_label": "Cooking",
            "ctx_a": "A man is standing in a kitchen.",
            "ctx_b": "he",
            "ctx": "A man is standing in a kitchen. he",
            "source_id": "activitynet~v_x",
            "split": "val",
            "split_type": "indomain",
            "label": str(i % 4),
            "endings": [
                "cuts the onions on a board.",
                "flies to the moon.",
                "reads a book [title] quietly.",
                "sings a song loudly.",
            ],
        }
        for i in range(4)
    ]
    arc = [
        {
            "id": f"Mercury_{i}",
            "question": q,
            "answerKey": key,
            "choices": {"text": ["iron", "wood", "water", "glass"], "label": ["A", "B", "C", "D"]},
        }
        for i, (q, key) in enumerate(
            [
                ("Which of these is a metal?", "A"),
                ("Which one is a liquid?", "C"),
                ("Which one can burn?", "B"),
            ]
        )
    ]
    piqa = [
        {
            "goal": "To open a jar of pickles,",
            "sol1": "twist the lid counterclockwise.",
            "sol2": "eat the lid.",
            "label": 0,
        },
        {
            "goal": "How to dry wet hands?",
            "sol1": "put them in water.",
            "sol2": "rub them with a towel.",
            "label": 1,
        },
        {
            "goal": "Keep bread fresh",
            "sol1": "store it in a sealed bag.",
            "sol2": "leave it in the rain.",
            "label": 0,
        },
    ]
    winogrande = [
        {
            "sentence": "The trophy did not fit in the suitcase because _ was too big.",
            "option1": "the trophy",
            "option2": "the suitcase",
            "answer": "1",
        },
        {
            "sentence": "The trophy did not fit in the suitcase because _ was too small.",
            "option1": "the trophy",
            "option2": "the suitcase",
            "answer": "2",
        },
    ]
    lambada = [
        {"text": "The function returns a new list containing all the items of the list"},
        {"text": "Return the number of items in the container and raise an error"},
    ]
    return {
        "hellaswag": {"validation": _jsonl(d / "hellaswag_validation.jsonl", hellaswag)},
        "arc_easy": {"test": _jsonl(d / "arc_easy_test.jsonl", arc)},
        "arc_challenge": {"test": _jsonl(d / "arc_challenge_test.jsonl", arc[:2])},
        "piqa": {"validation": _jsonl(d / "piqa_validation.jsonl", piqa)},
        "winogrande": {"validation": _jsonl(d / "winogrande_validation.jsonl", winogrande)},
        "lambada_openai": {"test": _jsonl(d / "lambada_test.jsonl", lambada)},
    }


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Point the Hub endpoint at a closed local port (refused at once on any machine)."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return lambda: None


@pytest.fixture
def shard_writer() -> Callable[..., Path]:
    """shard_writer(path, tokens, vocab="gpt2", split="val") -> path."""
    return write_shard

"""Fixtures shared across test packages: the embedded corpus and its real token shards, and
`small_fs`, a real full disk (a tmpfs of a given size).

The data layer (and zstandard, datasets with it) is imported inside the fixtures that use
it, never at this module's import: `make gpu-test` runs the CUDA tests in a GPU image with
only torch, NumPy, safetensors, tiktoken, PyYAML, tqdm and pytest (tests/test_gpu_env.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

# SLURM's client, where installed, asks its controller and waits ~10 s when none answers; the
# SLURM executor plugin asks (`scontrol show config`) each time Snakemake starts. No test outside
# tests/slurm asks a cluster: their runs read an empty SLURM config, which the client refuses at
# once (tests/slurm/conftest.py gives its cluster the real one back).
NO_SLURM_CONF = "/dev/null"
os.environ.setdefault("SLURM_CONF", NO_SLURM_CONF)

if not torch.cuda.is_available():
    # LEV's Triton kernels run on CPU tensors under Triton's interpreter, which Triton reads
    # once, at its import (torch._dynamo imports it): set before any test can
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` need a CUDA device (`make gpu-test` runs them); elsewhere they skip
    saying so."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (make gpu-test on a GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def embedded_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from leviathan.data.fetch import fetch_embedded

    out = tmp_path_factory.mktemp("embedded")
    fetch_embedded(out)
    return out


@pytest.fixture(scope="session")
def gpt2_shards(embedded_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from leviathan.data.prepare import tokenize_corpus

    out = tmp_path_factory.mktemp("tok_gpt2")
    tokenize_corpus(embedded_corpus, "gpt2", out, threads=2, processes=1, progress=False)
    return out


def _make_shard(path: Path, tokens: np.ndarray[Any, Any], vocab: str = "gpt2") -> Path:
    from leviathan.io import atomic_path
    from leviathan.manifest import vocab_record, write_manifest
    from leviathan.vocab import get_vocab

    spec = get_vocab(vocab)
    dtype = np.uint16 if spec.n_vocab <= 1 << 16 else np.uint32
    with atomic_path(path) as tmp:
        np.asarray(tokens, dtype=dtype).tofile(tmp)
    write_manifest(
        path,
        artifact_type="tokens",
        vocab=vocab_record(spec),
        fields={
            "split": "train",
            "dtype": np.dtype(dtype).name,
            "tokens": int(len(tokens)),
            "documents": 1,
        },
    )
    return path


@pytest.fixture
def make_shard() -> Callable[..., Path]:
    """make_shard(path, tokens, vocab="gpt2"): a synthetic shard with a real manifest."""
    return _make_shard


@pytest.fixture
def random_shards(tmp_path: Path) -> tuple[Path, Path]:
    """(train, val): shards of uniform random gpt2 ids with real manifests, for CLI runs."""
    rng = np.random.default_rng(0)
    train = _make_shard(tmp_path / "train.bin", rng.integers(0, 50_000, 8 * 65 * 8))
    val = _make_shard(tmp_path / "val.bin", rng.integers(0, 50_000, 65 * 8))
    return train, val


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """small_fs("60m"): a fresh tmpfs of that size, unmounted after the test (a real full
    disk; needs root, skipped saying why elsewhere)."""
    mounted: list[Path] = []

    def make(size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a small filesystem (mount -t tmpfs -o size=...) needs root")
        where = tmp_path / f"small{len(mounted)}"
        where.mkdir()
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)

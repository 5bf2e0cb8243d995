"""Loader: determinism from (seed, step), epoch coverage, DDP sharding, resume, validation."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from leviathan.data.loader import IGNORE_INDEX, DataMismatchError, TrainLoader, val_batches

CTX = 8


@pytest.fixture
def positions(tmp_path: Path, make_shard: Callable[..., Path]) -> Path:
    """A shard whose token at position i is i (mod 50000): windows reveal their offsets."""
    return make_shard(tmp_path / "train.bin", np.arange(CTX * 25 + 3) % 50_000)


def _loader(path: Path | list[Path], **kw: int) -> TrainLoader:
    args: dict[str, Any] = {"context": CTX, "global_batch": 4, "seed": 0} | kw
    return TrainLoader(path, **args)


def test_windows_shapes_and_shift(positions: Path) -> None:
    loader = _loader(positions)
    assert loader.n_windows == 25  # (203 - 1) // 8
    x, y = loader.batch(0)
    assert x.shape == y.shape == (4, CTX)
    assert x.dtype == y.dtype == torch.int64
    assert x.is_contiguous()
    assert y.is_contiguous()  # y.view(-1) works
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.all(x[:, 0] % CTX == 0)  # windows start at multiples of the context
    assert torch.equal(y[:, -1], x[:, 0] + CTX)  # context + 1 tokens per window


def test_same_seed_same_batches_other_seed_differs(positions: Path) -> None:
    a, b, c = _loader(positions), _loader(positions), _loader(positions, seed=1)
    for step in (0, 3, 17):
        assert torch.equal(a.batch(step)[0], b.batch(step)[0])
    assert not all(torch.equal(a.batch(s)[0], c.batch(s)[0]) for s in range(3))
    it = iter(a)
    assert all(torch.equal(next(it)[0], b.batch(s)[0]) for s in range(6))
    assert a.step == 6


def test_every_window_once_per_epoch(positions: Path) -> None:
    loader = _loader(positions, global_batch=5)  # 25 windows = 5 steps per epoch
    for epoch in range(3):
        starts = torch.cat([loader.batch(epoch * 5 + s)[0][:, 0] for s in range(5)])
        assert sorted(starts.tolist()) == [w * CTX for w in range(25)]
    first, second = (
        torch.cat([loader.batch(e * 5 + s)[0][:, 0] for s in range(5)]) for e in (0, 1)
    )
    assert not torch.equal(first, second)  # a fresh permutation each epoch


def test_batches_spanning_an_epoch_boundary(positions: Path) -> None:
    loader = _loader(positions, global_batch=7)  # 25 is not a multiple of 7
    seen = torch.cat([loader.batch(s)[0][:, 0] for s in range(4)])[:25]
    assert sorted(seen.tolist()) == [w * CTX for w in range(25)]


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_ranks_partition_the_global_batch(positions: Path, world: int) -> None:
    single = _loader(positions, global_batch=8)
    ranks = [_loader(positions, global_batch=8, rank=r, world_size=world) for r in range(world)]
    for step in (0, 1, 5):
        parts = [r.batch(step)[0] for r in ranks]
        assert all(p.shape[0] == 8 // world for p in parts)
        assert torch.equal(torch.cat(parts), single.batch(step)[0])  # no gaps, no overlap
    with pytest.raises(ValueError, match="not divisible by world_size=3"):
        _loader(positions, global_batch=8, world_size=3)
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        _loader(positions, rank=2, world_size=2)


def test_resume_from_state_dict(positions: Path) -> None:
    first = _loader(positions)
    it = iter(first)
    for _ in range(9):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))  # small and JSON-able
    assert state["step"] == 9
    assert len(json.dumps(state)) < 1000
    resumed = _loader(positions, world_size=2, global_batch=4)  # world size may change
    resumed.load_state_dict(state)
    assert resumed.step == 9
    rest = [next(it)[0] for _ in range(5)]
    again = [
        torch.cat([resumed.batch(s)[0], _loader(positions, rank=1, world_size=2).batch(s)[0]])
        for s in range(9, 14)
    ]
    assert all(torch.equal(a, b) for a, b in zip(rest, again, strict=True))


def test_resume_refuses_other_data(
    positions: Path, tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    state = _loader(positions).state_dict()
    other = make_shard(tmp_path / "other.bin", np.arange(CTX * 25 + 3)[::-1] % 50_000)
    cases = {
        "shards": _loader(other),
        "context": TrainLoader(positions, context=4, global_batch=4),
        "seed": _loader(positions, seed=5),
        "global_batch": _loader(positions, global_batch=8),
    }
    for key, loader in cases.items():
        with pytest.raises(DataMismatchError, match=rf"refusing to resume.*{key}"):
            loader.load_state_dict(state)
    o200k = make_shard(tmp_path / "o.bin", np.arange(CTX * 25 + 3), vocab="o200k_base")
    with pytest.raises(DataMismatchError, match="vocab"):
        _loader(o200k).load_state_dict(state)


def test_resume_under_another_numpy_needs_the_same_order(
    positions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _loader(positions).state_dict()
    assert state["numpy"] == np.__version__
    # another NumPy whose shuffle gives the same permutation: provably the same run, accepted
    _loader(positions).load_state_dict({**state, "numpy": "0.0.0-other"})
    # one whose shuffle differs (as a changed algorithm would): refused, naming NumPy
    other = _loader(positions)
    reversed_perm = other._perm(0)[::-1].copy()
    monkeypatch.setattr(other, "_perm", lambda epoch: reversed_perm)
    with pytest.raises(
        DataMismatchError, match=r"refusing to resume.*NumPy .* shuffles the windows differently"
    ):
        other.load_state_dict({**state, "numpy": "0.0.0-other"})


def test_multiple_shards_never_cross_boundaries(
    tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    a = make_shard(tmp_path / "a.bin", np.arange(0, 3 * CTX + 1))  # exactly 3 windows
    b = make_shard(tmp_path / "b.bin", np.arange(1000, 1000 + 2 * CTX + 5))  # 2 windows
    loader = _loader([a, b], global_batch=5)
    x, y = loader.batch(0)
    rows = torch.cat([x, y[:, -1:]], dim=1)
    assert sorted(rows[:, 0].tolist()) == [0, 8, 16, 1000, 1008]
    assert torch.all(rows[:, -1] - rows[:, 0] == CTX)  # contiguous: no row crosses shards
    assert len(loader.state_dict()["fingerprint"]["shards"]) == 2


def test_too_short_shard(tmp_path: Path, make_shard: Callable[..., Path]) -> None:
    short = make_shard(tmp_path / "s.bin", np.arange(CTX))
    with pytest.raises(ValueError, match="fewer than context\\+1=9 tokens"):
        _loader(short)


def test_a_shard_too_small_for_one_step_is_refused(
    tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    """195 tokens at context 8 are 24 windows: a global batch of 32 would repeat windows within
    every step (several epochs a step, and nothing said); one of 24 is the whole shard once."""
    shard = make_shard(tmp_path / "s.bin", np.arange(195))
    with pytest.raises(
        ValueError,
        match=r"195 tokens, 24 windows of context\+1=9: fewer than one step's "
        r"global_batch=32",
    ):
        _loader(shard, global_batch=32)
    rows = _loader(shard, global_batch=24).window_ids(0)
    assert sorted(rows.tolist()) == list(range(24))


def test_val_batches_cover_every_target_once(positions: Path) -> None:
    targets: list[int] = []
    batches = list(val_batches(positions, context=CTX, batch_size=4))
    assert [b[0].shape[0] for b in batches] == [4] * 6 + [2]  # ceil(202 / 8) = 26 windows
    for x, y in batches:
        keep = y != IGNORE_INDEX
        assert torch.equal(x[:, 1:][keep[:, 1:]], y[:, :-1][keep[:, 1:]])
        targets += y[keep].tolist()
    assert targets == list(range(1, CTX * 25 + 3))  # in order, none twice, none missing
    assert int((batches[-1][1] == IGNORE_INDEX).sum()) == 26 * CTX - 202


def test_val_batches_ranks_and_prefix(positions: Path) -> None:
    def targets(**kw: Any) -> list[int]:
        out: list[int] = []
        for _, y in val_batches(positions, context=CTX, batch_size=3, **kw):
            out += y[y != IGNORE_INDEX].tolist()
        return out

    per_rank = [targets(rank=r, world_size=3) for r in range(3)]
    assert sorted(sum(per_rank, [])) == list(range(1, CTX * 25 + 3))
    assert targets(max_windows=2) == list(range(1, 2 * CTX + 1))


def test_loader_on_real_shards(o200k_shards: Path) -> None:
    loader = TrainLoader(
        o200k_shards / "train.bin", context=64, global_batch=8, seed=3, vocab="o200k_base"
    )
    x, y = loader.batch(100)
    assert x.max() < 200019
    assert loader.fingerprint["dtype"] == "uint32"
    assert loader.fingerprint["vocab"] == "o200k_base"
    n = sum(
        int((y != IGNORE_INDEX).sum())
        for _, y in val_batches(o200k_shards / "val.bin", context=64, batch_size=16)
    )
    assert n == len(np.memmap(o200k_shards / "val.bin", dtype=np.uint32)) - 1


def test_order_is_pinned(positions: Path) -> None:
    """The seed-0 order is fixed data: a change here breaks resuming old checkpoints."""
    assert _loader(positions, global_batch=8).window_ids(0).tolist() == [
        19,
        4,
        10,
        11,
        24,
        2,
        23,
        6,
    ]


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetch_yields_the_same_batches_bitwise(positions: Path, depth: int) -> None:
    """Read ahead in threads across epoch boundaries (25 windows, 7 per step), from a resume
    step: the batches of a fresh loader's synchronous `batch(step)`, bit for bit, in order."""
    reference = _loader(positions, global_batch=7)
    loader = _loader(positions, global_batch=7)
    with loader.prefetch(2, 14, depth=depth) as batches:
        for step in range(2, 14):
            x, y = batches.get(step)
            want_x, want_y = reference.batch(step)
            assert torch.equal(x, want_x), step
            assert torch.equal(y, want_y), step
            assert x.dtype == torch.int64
            assert x.is_contiguous()
        with pytest.raises(ValueError, match="expected 14"):
            batches.get(14)  # past `stop`


def test_the_loader_moves_its_position_as_it_hands_batches_out(positions: Path) -> None:
    """The position a checkpoint records is the loader's own: after the batches of steps
    [2, 5) are handed out it is 5, and a loader resumed there hands out step 5's batch next."""
    loader = _loader(positions, global_batch=7)
    loader.load_state_dict(loader.state_dict() | {"step": 2})
    with loader.prefetch(2, 9, depth=2) as batches:
        for step in range(2, 5):
            batches.get(step)
            assert loader.step == step + 1
    assert loader.state_dict()["step"] == 5  # read ahead (steps 5, 6) is not handed out
    resumed = _loader(positions, global_batch=7)
    resumed.load_state_dict(loader.state_dict())
    x, _ = next(iter(resumed))
    assert torch.equal(x, _loader(positions, global_batch=7).batch(5)[0])
    assert resumed.step == 6


def test_prefetch_refuses_steps_out_of_order_and_raises_a_reads_error(
    tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    # one token id outside gpt2's vocabulary: the step whose batch holds it fails, when asked
    tokens = np.arange(CTX * 25 + 3) % 50_000
    tokens[5 * CTX + 2] = 60_000
    bad = make_shard(tmp_path / "bad.bin", tokens)
    loader = _loader(bad, global_batch=5)
    failing = next(s for s in range(5) if 5 in loader.window_ids(s).tolist())
    with loader.prefetch(0, 5, depth=2) as batches:
        with pytest.raises(ValueError, match="asked for step 3, expected 0"):
            batches.get(3)
        for step in range(failing):
            batches.get(step)
        with pytest.raises(ValueError, match="outside \\[0, 50257\\)"):
            batches.get(failing)


def test_batch_rows_are_the_windows_read_from_the_files(
    tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    """Against the files read directly (np.fromfile) and the module's window definition:
    window w of a shard is tokens [w*T, w*T + T + 1), global ids running through the shards."""
    rng = np.random.default_rng(1)
    paths = [
        make_shard(tmp_path / "a.bin", rng.integers(0, 50_000, 5000)),
        make_shard(tmp_path / "b.bin", rng.integers(0, 50_000, 3001)),
    ]
    raw = [np.fromfile(p, dtype="<u2").astype(np.int64) for p in paths]
    per_shard = [(len(r) - 1) // CTX for r in raw]
    loader = TrainLoader(paths, context=CTX, global_batch=12, seed=3, rank=1, world_size=2)
    for step in range(0, 200, 7):
        want = []
        for w in loader.window_ids(step).tolist():
            shard = 0 if w < per_shard[0] else 1
            start = (w - (0 if shard == 0 else per_shard[0])) * CTX
            want.append(raw[shard][start : start + CTX + 1])
        rows = np.stack(want)
        x, y = loader.batch(step)
        assert np.array_equal(x.numpy(), rows[:, :-1])
        assert np.array_equal(y.numpy(), rows[:, 1:])


def test_a_run_over_the_whole_shard_keeps_none_of_it_resident(
    tmp_path: Path, make_shard: Callable[..., Path], resident_file_kb: Callable[[], int]
) -> None:
    """Batches read every part of a 64 MB shard, yet the process keeps no file pages resident
    (reads, not a map: at the study's size a map would keep the 100 GB shard in each rank)."""
    n = 32 << 20  # uint16 tokens: 64 MB
    path = make_shard(tmp_path / "big.bin", np.arange(n) % 50_000)
    loader = TrainLoader(path, context=512, global_batch=512, seed=0)
    before = resident_file_kb()
    steps = 2 * loader.n_windows // loader.global_batch  # two epochs: every window read
    for step in range(steps):
        x, _ = loader.batch(step)
        assert x.shape == (512, 512)
    assert resident_file_kb() - before < 8 << 10


def test_leviathan_train_on_a_195_token_shard_says_so_in_one_line(
    tmp_path: Path, make_shard: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The micro scale's context is 64 and its global batch 8: 195 tokens are 3 windows."""
    from leviathan.cli import main
    from leviathan.train.config import train_config

    cfg = train_config("micro", "gpt2", "leviathan")
    shard = make_shard(tmp_path / "train.bin", np.arange(195))
    argv = ["train", "--scale", "micro", "--vocab", "gpt2", "--variant", "leviathan"]
    argv += ["--train", str(shard), "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--runtime", "progress=false"]) == 2
    assert capsys.readouterr().err == (
        f"leviathan train: error: {[str(shard)]}: 195 tokens, {194 // cfg.context} windows of "
        f"context+1={cfg.context + 1}: fewer than one step's global_batch={cfg.global_batch}, so "
        "every step would train the same windows more than once; use a larger corpus, a shorter "
        "context or a smaller global batch\n"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()

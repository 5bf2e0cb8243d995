"""Validation loss / perplexity / bits per byte over a whole split, and sliding windows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from leviathan.data.shards import open_shard
from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import load_model
from leviathan.eval.config import ValConfig
from leviathan.eval.errors import EvalInputError
from leviathan.eval.perplexity import evaluate_shard, score_stream, stream_windows
from leviathan.eval.results import write_result
from leviathan.eval.val import evaluate_val


def direct_losses(model, tokens: np.ndarray, context: int) -> np.ndarray:
    """Loss of every target of a shard, window by window with the LanguageModel itself."""
    out = []
    for start in range(0, len(tokens) - 1, context):
        chunk = torch.as_tensor(tokens[start : start + context + 1].astype(np.int64))
        out.append(model.token_losses(chunk[None, :-1], chunk[None, 1:])[0].numpy())
    return np.concatenate(out)


def test_val_covers_every_target_once_and_matches_the_model(
    loaded, small_val: Path, tmp_path: Path
) -> None:
    ckpt, em = loaded
    out = evaluate_val(ckpt, em, small_val, cfg=ValConfig(batch_size=5))
    tokens = np.asarray(open_shard(small_val).tokens)
    expected = direct_losses(load_model(ckpt), tokens, ckpt.context)
    o = out["results"]["overall"]
    assert o["targets"] == len(tokens) - 1 == expected.size
    assert o["loss"] == pytest.approx(expected.astype(np.float64).mean(), rel=1e-5)
    assert o["perplexity"] == pytest.approx(math.exp(o["loss"]), rel=1e-12)
    enc = load_tokenizer("gpt2").encoding
    n_bytes = sum(
        len(enc.decode_single_token_bytes(int(t))) for t in tokens[1:] if t != enc.eot_token
    )
    assert o["bytes"] == n_bytes
    assert o["bits_per_byte"] == pytest.approx(expected.sum() / math.log(2) / n_bytes, rel=1e-5)
    # provenance: the checkpoint's hash and the shard's manifest
    assert out["checkpoint"]["sha256"] == ckpt.sha256
    (val_input,) = out["inputs"]
    assert val_input["role"] == "val_tokens"
    assert val_input["manifest"]["kind"] == "tokens"
    assert val_input["sha256"] == val_input["manifest"]["artifact"]["sha256"]
    path = write_result(tmp_path / "val.json", out)
    assert (
        json.loads(
            path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")
        )["kind"]
        == "val"
    )


def test_envelope_carries_the_provenance_record(loaded, tmp_path: Path, monkeypatch) -> None:
    import datetime as dt

    from leviathan.eval.results import envelope
    from leviathan.manifest import write_manifest
    from leviathan.provenance import PACKAGES, config_sha256

    monkeypatch.setenv("SLURM_JOB_ID", "99")
    ckpt, _ = loaded
    started = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    env = envelope(
        "val",
        checkpoint=ckpt,
        inputs=[],
        config={"b": 2, "a": 1},
        results={},
        seconds=1.23456,
        device="cpu",
        started=started,
    )
    assert env["config"] == {"a": 1, "b": 2}
    assert env["config_sha256"] == config_sha256({"b": 2, "a": 1})
    assert env["started_utc"] == started.isoformat(timespec="seconds") <= env["finished_utc"]
    assert env["env"]["slurm_job_id"] == "99"
    assert env["env"]["device"] == "cpu"
    assert set(PACKAGES) <= env["env"]["packages"].keys()
    assert env["seconds"] == 1.235
    assert env["checkpoint"]["manifest"]
    assert env["checkpoint"]["sha256"] == ckpt.sha256
    # the same fields, from the same function, as a manifest's
    art = tmp_path / "a.bin"
    art.write_bytes(b"x")
    m = write_manifest(art, artifact_type="tokens", config={"a": 1}, started=started, device="cpu")
    prov = ("code", "env", "config", "config_sha256", "started_utc", "finished_utc")
    assert set(prov) <= m.keys()
    assert set(prov) <= env.keys()
    assert m["env"].keys() == env["env"].keys()
    assert m["code"] == env["code"]
    # without a start time the envelope says so rather than guessing
    assert envelope("val", checkpoint=None, inputs=[], config={}, results={})["started_utc"] is None


def test_batch_size_and_prefix_windows(loaded, small_val: Path) -> None:
    ckpt, em = loaded
    a = evaluate_shard(
        em, small_val, vocab="gpt2", context=64, batch_size=1, max_windows=7, keep_token_losses=True
    )
    b = evaluate_shard(
        em,
        small_val,
        vocab="gpt2",
        context=64,
        batch_size=16,
        max_windows=7,
        keep_token_losses=True,
    )
    assert a.n_targets == b.n_targets == 7 * 64
    np.testing.assert_allclose(a.token_losses, b.token_losses, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a.count, b.count)
    assert a.total_loss == pytest.approx(float(a.token_losses.astype(np.float64).sum()), rel=1e-6)


def test_context_longer_than_the_model_is_refused(loaded, small_val: Path) -> None:
    ckpt, em = loaded
    with pytest.raises(EvalInputError, match="max_seq_len"):
        evaluate_val(ckpt, em, small_val, cfg=ValConfig(context=65))


@pytest.mark.parametrize(
    "n,context,stride", [(2, 4, 4), (10, 4, 4), (11, 4, 1), (50, 8, 3), (9, 8, 8), (100, 16, 16)]
)
def test_stream_windows_score_every_target_once(n: int, context: int, stride: int) -> None:
    seen: list[int] = []
    for begin, first, end in stream_windows(n, context, stride):
        assert end - begin <= context
        assert begin + 1 <= first <= end <= n - 1
        seen += range(first, end + 1)
    assert seen == list(range(1, n))


def test_score_stream_matches_direct_windows(loaded) -> None:
    ckpt, em = loaded
    model = load_model(ckpt)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50257, size=150)
    disjoint = score_stream(em, tokens, context=64, stride=64, batch_size=2)
    np.testing.assert_allclose(disjoint, direct_losses(model, tokens, 64), rtol=1e-4, atol=1e-5)
    sliding = score_stream(em, tokens, context=64, stride=16, batch_size=3)
    # target t scored in the window that starts at the largest multiple of 16 with t - begin <= 64
    for t in (1, 64, 65, 80, 81, 149):
        begin = 0 if t <= 64 else 16 * math.ceil((t - 64) / 16)
        x = torch.as_tensor(tokens[begin:t].astype(np.int64))[None]
        y = torch.full_like(x, -100)
        y[0, -1] = int(tokens[t])
        assert sliding[t - 1] == pytest.approx(float(model.token_losses(x, y)[0, -1]), rel=1e-4)

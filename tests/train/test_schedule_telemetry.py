import math

import pytest

from leviathan.device import mfu, peak_flops
from leviathan.train.config import TrainConfig, train_config
from leviathan.train.schedule import lr_at


def test_warmup_then_cosine_to_ten_percent() -> None:
    peak, warmup, total = 1e-3, 10, 110
    lrs = [lr_at(s, peak=peak, warmup=warmup, total=total, min_ratio=0.1) for s in range(total)]
    assert lrs[0] == pytest.approx(peak / warmup)
    assert lrs[warmup - 1] == pytest.approx(peak)
    assert all(a < b for a, b in zip(lrs[:warmup], lrs[1:warmup], strict=False))
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1 :], strict=False))
    assert lrs[warmup + 50] == pytest.approx(peak * (0.1 + 0.9 * 0.5))  # half-way: cos = 0
    assert lr_at(total, peak=peak, warmup=warmup, total=total, min_ratio=0.1) == pytest.approx(
        0.1 * peak
    )


def test_recipe_defaults_are_the_papers() -> None:
    cfg = train_config("400m", "o200k_base", "leviathan")
    assert cfg.betas == (0.9, 0.999)
    assert cfg.eps == 1e-8
    assert cfg.weight_decay == 0.0
    assert cfg.grad_clip == 1.0
    assert cfg.min_lr_ratio == 0.1
    assert cfg.context == 512
    assert cfg.global_batch == 512
    assert cfg.tokens_per_step == 262_144
    assert cfg.total_tokens == 8_400_000_000
    assert cfg.max_steps == math.ceil(8.4e9 / 262_144)  # ~32k steps, as docs/method.md §4 says


@pytest.mark.parametrize(
    ("changes", "world", "message"),
    [
        ({"micro_batch": 3}, 1, r"micro_batch=3 does not divide the per-rank batch 8"),
        ({"global_batch": 9}, 2, r"global_batch=9 is not divisible by the 2 ranks"),
        ({"lr": 0.0}, 1, r"train.lr=0.0 must be > 0"),
        ({"context": 0}, 1, r"train.context=0 must be a positive integer"),
    ],
)
def test_bad_train_configs(changes: dict, world: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        train_config("micro", "gpt2", "tied", **changes).validate(world)


def test_unknown_train_key() -> None:
    with pytest.raises(
        ValueError, match=r"^train config: unknown key 'learning_rate': valid keys are scale, vocab"
    ):
        train_config("micro", "gpt2", "tied", learning_rate=1.0)


def test_fingerprint_tracks_values() -> None:
    a = train_config("micro", "gpt2", "tied")
    assert a.fingerprint() == TrainConfig.from_dict(a.to_dict()).fingerprint()
    assert a.fingerprint() != a.with_(lr=a.lr * 2).fingerprint()


def test_mfu_knows_h100_h200_and_says_unknown_otherwise() -> None:
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("cpu") is None
    assert mfu(1000.0, 10**9, None, 1) == "unknown"
    assert mfu(989.0, 10**9, 989e12, 1) == pytest.approx(1e-3)
    assert mfu(989.0, 10**9, 989e12, 2) == pytest.approx(5e-4)


def test_prune_keeps_the_newest_and_removes_dead_writers_leftovers(tmp_path) -> None:
    import torch

    from leviathan.checkpoint import files, store

    for step in (1, 2, 3):
        store.save_checkpoint(
            tmp_path,
            files.step_dir(tmp_path, step).name,
            model_state={"w": torch.ones(2)},
            optim_state={"state": {}, "param_groups": []},
            state={"step": step},
        )
    (tmp_path / ".step_00000004.99999999.tmp").mkdir()  # a writer killed mid-write
    store.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000002", "step_00000003"]
    assert store.latest_checkpoint(tmp_path).step == 3


def test_threads_zero_means_every_cpu_of_the_process() -> None:
    import os

    from leviathan.train.config import RuntimeConfig

    assert RuntimeConfig(threads=0).threads == len(os.sched_getaffinity(0))
    assert RuntimeConfig().threads is None  # torch's own default


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:3", "mps"])
def test_device_strings_torch_reads_are_accepted(spec: str) -> None:
    import torch

    from leviathan.train.config import RuntimeConfig

    assert RuntimeConfig(device=spec).device == spec
    if spec != "auto":
        torch.device(spec)  # the independent check: torch reads every string accepted

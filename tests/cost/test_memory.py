"""GPU memory per job in the plan: the traced peaks with their allowances beside the GPU's
memory, and a micro-batch that does not fit refused in one line naming the largest that does."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from leviathan.cells import Cell
from leviathan.cost.memory import FRAGMENTATION, fitting_micro_batch, train_memory
from leviathan.cost.plan import cell_memory
from leviathan.cost.plan_text import render_plan
from leviathan.gpus import GIB
from leviathan.study.config import resolve
from leviathan.study.resolve import cell_train_config

ROOT = Path(__file__).resolve().parents[2]


def _one_cell(scale: str, variant: str, **resources: Any) -> dict[str, Any]:
    """The paper's config with one study of one cell (the plan traces one job of each kind)."""
    config = copy.deepcopy(resolve([ROOT / "config" / "paper.yaml"], root=ROOT))
    config["studies"] = {
        "one": {"scales": [scale], "vocabs": ["o200k_base"], "variants": [variant], "seeds": [0]}
    }
    config["resources"][scale].update(resources)
    return config


def test_the_plan_prints_each_jobs_memory_beside_its_gpus() -> None:
    config = _one_cell("1.2b", "tied")
    text = render_plan(config)
    train, evaluation = cell_memory(config, Cell("1.2b", "o200k_base", "tied", 0, "pile"))
    assert train is not None
    assert evaluation is not None
    rows = [line for line in text.splitlines() if line.startswith("1.2b/o200k_base/tied/seed0")]
    assert len(rows) == 2  # the training row and the evaluation row
    assert rows[0].endswith(f"{train.total / GIB:.1f}/80 GB")
    assert rows[1].endswith(f"{evaluation.total / GIB:.1f}/80 GB")
    assert "DDP's gradient buckets" in text
    assert train.fits
    # 8 GPUs: DDP's buckets hold an fp32 copy of every gradient (4 bytes per parameter)
    cfg = cell_train_config(config, Cell("1.2b", "o200k_base", "tied", 0, "pile")).model_config()
    one_gpu = train_memory(cfg, 16, 1, "h100")
    assert train.ddp_buckets == 4 * sum(p.numel() for p in _meta(cfg).parameters())
    assert one_gpu.ddp_buckets == 0
    assert train.total - one_gpu.total == pytest.approx(
        train.ddp_buckets * (1 + FRAGMENTATION) + 2**30, rel=1e-6
    )


def _meta(cfg: Any) -> Any:
    from leviathan.model.language_model import build_model

    return build_model(cfg, device="meta")


def test_a_micro_batch_that_does_not_fit_is_refused_naming_the_largest_that_does() -> None:
    # an A10G's 24 GB cannot hold the 200m step at 64 sequences per forward
    config = _one_cell("200m", "tied", gpu_model="a10g")
    with pytest.raises(ValueError) as refused:
        render_plan(config)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("train.200m.micro_batch=64 needs ")
    largest = int(re.search(r"set train\.200m\.micro_batch: (\d+)", message).group(1))  # type: ignore[union-attr]
    cfg = cell_train_config(config, Cell("200m", "o200k_base", "tied", 0, "pile")).model_config()
    assert train_memory(cfg, largest, 1, "a10g").fits
    assert not train_memory(cfg, 2 * largest, 1, "a10g").fits  # the next divisor of 512 does not
    fixed = copy.deepcopy(config)
    fixed["train"]["200m"]["micro_batch"] = largest
    assert "200m/o200k_base/tied/seed0" in render_plan(fixed)


def test_an_out_of_memory_refusal_names_the_largest_micro_batch_that_fits() -> None:
    """What `leviathan train` adds to the trainer's refusal on a GPU the memory model knows:
    the largest micro-batch below the one that ran out that fits (the next divisor does not);
    none on a CPU or an unknown GPU, where the trainer's halving stands."""
    from leviathan.train.errors import out_of_memory

    config = _one_cell("200m", "tied", gpu_model="a10g")
    cfg = cell_train_config(config, Cell("200m", "o200k_base", "tied", 0, "pile")).model_config()
    fitting = fitting_micro_batch(cfg, "NVIDIA A10G", (512, 64, 1))
    assert fitting is not None and 512 % fitting == 0
    assert train_memory(cfg, fitting, 1, "a10g").fits
    assert not train_memory(cfg, 2 * fitting, 1, "a10g").fits
    assert fitting_micro_batch(cfg, None, (512, 64, 1)) is None  # a CPU
    assert fitting_micro_batch(cfg, "Some Future GPU", (512, 64, 1)) is None
    kw = {"step": 3, "device": "cuda:0", "last_good": "run/checkpoints/step_00000002"}
    halved = out_of_memory("200m", 64, 512, model_cfg=cfg, **kw)
    assert "micro_batch: 32 " in str(halved)
    named = halved.with_fitting(fitting)
    assert f"set train.200m.micro_batch: {fitting} " in str(named)
    assert named.record["message"] == str(named) and named.record["micro_batch"] == 64
    assert named.at == halved.at


def test_sharded_trace_counts_the_state_at_one_over_world() -> None:
    """FSDP's trace: parameters and AdamW's moments (12 bytes per parameter, held all step)
    count 1/world, so the peak falls by at least 12 P (1 - 1/W); gradients and the weights'
    bf16 compute copies (at most 4 + 2 bytes) are the most more it can fall."""
    from leviathan.cost.step_count import trace_step
    from leviathan.model import build_model, model_config

    cfg = model_config("micro", "gpt2", "tied")
    params = sum(p.numel() for p in build_model(cfg).parameters())
    whole = trace_step(cfg, 8, count=False).peak_bytes
    for world in (2, 8):
        sharded = trace_step(cfg, 8, count=False, world=world).peak_bytes
        rebate = params * (1 - 1 / world)
        assert whole - 18 * rebate - 8 <= sharded <= whole - 12 * rebate + 8, world


def test_7b_fits_an_h100_only_sharded() -> None:
    """The 7b study's plan: 64 H100s, micro-batch 16; DDP would hold 16 bytes per parameter
    whole (117 GB), FSDP fits with the gathered groups."""
    from leviathan.model import model_config
    from leviathan.model.accounting import account

    cfg = model_config("7b", "o200k_base", "leviathan")
    fsdp = train_memory(cfg, 16, 64, "h100", "fsdp")
    ddp = train_memory(cfg, 16, 64, "h100", "ddp")
    assert fsdp.fits and not ddp.fits
    assert ddp.traced > 16 * account(cfg, cfg.max_seq_len).total_params
    assert fsdp.total < 80 * GIB

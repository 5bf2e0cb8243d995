"""The traced training step (FakeTensors, the trainer's step at the study's shapes) against
the roofline's analytic bytes, and its live-memory peak against torch's own tracker."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost.roofline import roofline
from leviathan.cost.step_count import LiveMemory, StepTrace, fused_loss_available, trace_step
from leviathan.model import model_config

ROOT = Path(__file__).resolve().parents[2]


@cache
def _study_step(scale: str, variant: str) -> tuple[StepTrace, int]:
    """One counted micro-batch step at the micro-batch config/paper.yaml gives the scale."""
    from leviathan.cells import Cell
    from leviathan.study.config import resolve
    from leviathan.study.resolve import cell_train_config

    config = resolve([ROOT / "config" / "paper.yaml"], root=ROOT)
    micro = cell_train_config(config, Cell(scale, "o200k_base", variant, 0, "pile")).micro_batch
    return trace_step(model_config(scale, "o200k_base", variant), micro), micro


@pytest.mark.parametrize("variant", ["tied", "leviathan"])
@pytest.mark.parametrize("scale", ["400m", "1.2b"])
def test_the_rooflines_bytes_hold_the_counted_step_within_1_5x(scale: str, variant: str) -> None:
    trace, micro = _study_step(scale, variant)
    cfg = model_config(scale, "o200k_base", variant)
    predicted = roofline(cfg, micro, global_batch=micro)  # one micro-batch per AdamW step
    for part in predicted.parts:
        ratio = part.bytes / trace.bytes[part.name]
        assert 1 / 1.5 <= ratio <= 1.5, (part.name, ratio)


@pytest.mark.parametrize("variant", ["tied", "leviathan"])
@pytest.mark.parametrize("scale", ["400m", "1.2b"])
def test_each_part_describes_the_kernels_the_count_sees(scale: str, variant: str) -> None:
    """Within 10% per part. Where they differ, it is what the CPU stand-in runs otherwise
    than a GPU: attention's CPU flash kernels and the linears' reshapes (backbone, the
    roofline ~4% over), AdamW's fused step counted as one op reading p, g, m, v and writing
    three (the roofline's 28 bytes per parameter with clipping's 12; counted 44)."""
    if not fused_loss_available():
        pytest.skip("Triton is not importable here: the loss's kernels cannot be traced")
    trace, micro = _study_step(scale, variant)
    cfg = model_config(scale, "o200k_base", variant)
    predicted = roofline(cfg, micro, global_batch=micro)
    for name in ("backbone", "input", "optimizer"):
        assert predicted.part(name).bytes == pytest.approx(trace.bytes[name], rel=0.1), name
    # the fused loss's model is the count of its custom ops; beside them the count has the
    # generated embeddings' fp32 cast (LanguageModel.hidden, outside any module: 0.8%)
    assert predicted.part("head+loss").bytes == pytest.approx(trace.bytes["head+loss"], rel=0.01)


def test_the_traced_step_covers_the_four_parts_and_a_plausible_peak() -> None:
    trace, micro = _study_step("400m", "tied")
    assert set(trace.bytes) == {"input", "backbone", "head+loss", "optimizer"}
    cfg = model_config("400m", "o200k_base", "tied")
    params = sum(p.numel() for p in _meta_model(cfg).parameters())
    # weights and AdamW's two moments (fp32) are held throughout: a floor on the peak
    assert trace.peak_bytes > 3 * 4 * params
    assert trace.tokens == micro * cfg.max_seq_len


def _meta_model(cfg: object) -> torch.nn.Module:
    from leviathan.model.language_model import build_model

    return build_model(cfg, device="meta")  # type: ignore[arg-type]


def test_live_memory_peak_equals_torchs_mem_tracker() -> None:
    """An independent reference: torch.distributed._tools.mem_tracker.MemTracker's peak of
    the same step (its categories summed) over the same FakeTensors."""
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    with FakeTensorMode():
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
        )
        opt = torch.optim.AdamW(model.parameters(), foreach=True)
        x = torch.empty(512, 256)

        def step() -> None:
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # AdamW's moments exist from here on
        ours = LiveMemory()
        ours.hold(list(model.parameters()), opt.state, x)
        with ours:
            step()
        theirs = mem_tracker.MemTracker()
        theirs.track_external(model, opt, x)
        with theirs:
            step()
    peak = theirs.get_tracker_snapshot("peak")
    assert ours.peak == sum(v["Total"] for v in peak.values())

"""Chunk sizes follow the device: the CPU rule keeps the cache-sized values, the GPU rule
gives a 400m step a handful of chunks, and under torch.compile LEV traces one chunk, so the
traced graph does not grow with the number of distinct ids."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import leviathan.device as device_module
from leviathan.device import REFERENCE_GPU_BYTES, chunk_elems, forced_policy
from leviathan.model import LEVConfig, model_config
from leviathan.model.lev import LEV
from leviathan.model.loss import DEFAULT_CHUNK_ELEMS
from leviathan.model.spline_product import _chunks

CPU = torch.device("cpu")
IDS_400M = 8192  # distinct ids of a 400m micro-batch of 16 x 512 tokens: at most this many


def test_cpu_rule_keeps_the_cache_sized_chunks() -> None:
    lev = LEVConfig().chunk_elems
    assert chunk_elems(CPU, lev) == lev
    assert chunk_elems(CPU, DEFAULT_CHUNK_ELEMS) == DEFAULT_CHUNK_ELEMS
    with forced_policy("cpu"):
        assert chunk_elems(CPU, lev) == lev


def test_gpu_rule_gives_a_400m_step_a_handful_of_chunks() -> None:
    cfg = model_config("400m", "o200k_base", "leviathan")
    per_id = cfg.lev.n_heads * cfg.lev.d_seed * cfg.lev.rank  # elements of phi per id
    with forced_policy("gpu"):
        budget = chunk_elems(CPU, LEVConfig().chunk_elems)
        lev_chunks = len(list(_chunks(IDS_400M, per_id, budget)))
        loss_rows = chunk_elems(CPU, DEFAULT_CHUNK_ELEMS) // cfg.vocab_size
    assert budget * 4 <= REFERENCE_GPU_BYTES / 32  # one fp32 buffer: <= 1/32 of the memory
    assert lev_chunks <= 2  # was IDS_400M / 16 = 512 under the cache-sized rule
    assert -(-16 * 512 // loss_rows) <= 8  # loss chunks per 400m micro-batch (was 50)


@pytest.mark.slow
def test_traced_lev_graph_does_not_grow_with_distinct_ids() -> None:
    """Dynamo's graph of LEV (forward, and the backward it traces for the autograd
    function) at the 400m shape, GPU rule forced: the same node count for 16 and 200
    distinct ids (the cache-sized loop unrolled to 967 nodes at 200 ids against 139 at 16)."""
    cfg = model_config("400m", "o200k_base", "leviathan")
    counts: list[int] = []

    def count_nodes(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        graphs = [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]
        counts.append(sum(len(g.graph.nodes) for g in graphs))
        return gm.forward

    torch.manual_seed(0)
    lev = LEV(cfg.vocab_size, cfg.d_model, cfg.lev_base, cfg.lev)
    lev.kernel = "plain"  # the path CUDA takes
    with forced_policy("gpu"):
        for n_ids in (16, 200):
            torch._dynamo.reset()
            traced = torch.compile(lev.generate, backend=count_nodes, dynamic=False, fullgraph=True)
            traced(torch.randperm(cfg.vocab_size)[:n_ids]).sum().backward()
    assert len(counts) == 2, counts
    assert counts[0] == counts[1], counts


def test_device_memory_asks_the_driver_once_per_cuda_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU rule's chunk sizes read the device's memory from a cache after the first ask
    (no device query left for code traced later); a CPU gets the reference GPU's memory."""
    asked: list[torch.device] = []

    def properties(device: torch.device) -> SimpleNamespace:
        asked.append(device)
        return SimpleNamespace(total_memory=141 * 2**30)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(device_module, "_memory", {})
    gpu = torch.device("cuda", 3)
    with forced_policy("gpu"):
        first = chunk_elems(gpu, DEFAULT_CHUNK_ELEMS)
        assert chunk_elems(gpu, DEFAULT_CHUNK_ELEMS) == first == int(141 * 2**30 / 64) // 4
        assert chunk_elems(CPU, 1) == REFERENCE_GPU_BYTES // 64 // 4
    assert asked == [gpu]

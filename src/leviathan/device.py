"""Device selection shared by training and evaluation, the device's name and dense bf16 peak
(MFU's denominator), and the chunk sizes each device gets.

Chunk sizes follow the device (docs/gpu.md, "Shapes for a GPU"). On a CPU they come from the
cache (LEV's `LEVConfig.chunk_elems`, the loss's `DEFAULT_CHUNK_ELEMS`: fixed sizes, so CPU
results and the native kernel's path do not depend on the machine's memory). On a GPU they come from its memory:
one chunk buffer may hold `GPU_CHUNK_FRACTION` of the device's memory (fp32), so a 400m
step runs LEV in one chunk and the loss in a few, each a handful of large kernels instead of
hundreds of small ones. `forced_policy("gpu")` applies the GPU rule on any device (tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from leviathan.gpus import gpu_model

GPU_CHUNK_FRACTION = 1 / 64  # of the device's memory, per fp32 chunk buffer (H200: 2.2 GB)
REFERENCE_GPU_BYTES = 80 * 2**30  # an H100's memory: the GPU rule where no GPU is present
POLICIES = ("auto", "cpu", "gpu")
_forced = "auto"
_memory: dict[torch.device, int] = {}  # device_memory's answers, per CUDA device


def resolve_device(spec: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """'auto' (or None): this rank's GPU if CUDA is available, else the CPU; 'cuda' without an
    index: this rank's GPU. A CUDA device where CUDA is missing is a ValueError saying so."""
    if spec is None or str(spec) == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(spec)!r}: CUDA is not available here; use cpu or auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device(f"cuda:{local_rank}")
    return device


def set_deterministic() -> None:
    """Deterministic kernels everywhere (LEV's backward then sums rows by a sort-based
    segment reduction instead of index_add_'s atomics); cuBLAS needs a fixed workspace,
    set before its first use."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def peak_flops(name: str) -> float | None:
    """The device's dense bf16 peak (`leviathan.gpus`), or None where we do not know it."""
    model = gpu_model(name)
    return model.bf16_flops if model else None


def mfu(
    tokens_per_s: float, flops_per_token: int, peak: float | None, n_devices: int
) -> float | str:
    """Model FLOPs utilisation, or "unknown" when the device's peak is not known."""
    if peak is None:
        return "unknown"
    return tokens_per_s * flops_per_token / (peak * n_devices)


@contextmanager
def forced_policy(policy: str) -> Iterator[None]:
    """Within the block, chunk sizes follow `policy` ("cpu", "gpu" or "auto") on any device."""
    global _forced
    if policy not in POLICIES:
        raise ValueError(f"chunk policy {policy!r}: use one of {POLICIES}")
    before, _forced = _forced, policy
    try:
        yield
    finally:
        _forced = before


def uses_gpu_policy(device: torch.device) -> bool:
    return _forced == "gpu" or (_forced == "auto" and device.type == "cuda")


def chunk_elems(device: torch.device, cpu_elems: int) -> int:
    """Elements one fp32 chunk buffer may hold on `device`: `cpu_elems` (cache-sized) under
    the CPU rule; `GPU_CHUNK_FRACTION` of the device's memory under the GPU rule."""
    if not uses_gpu_policy(device):
        return cpu_elems
    return max(cpu_elems, int(device_memory(device) * GPU_CHUNK_FRACTION) // 4)


def device_memory(device: torch.device) -> int:
    """Bytes of memory of `device`, asked of the driver once per CUDA device and then read
    from `_memory` (code traced by torch.compile after the first call holds no device query;
    `leviathan.train.regions.compile_regions` asks before anything compiles);
    REFERENCE_GPU_BYTES for any other device (the GPU rule applied where no GPU is)."""
    if device.type != "cuda":
        return REFERENCE_GPU_BYTES
    if device not in _memory:
        _memory[device] = int(torch.cuda.get_device_properties(device).total_memory)
    return _memory[device]

"""The GPU models the project knows: dense bf16 peak, HBM bandwidth and memory, from the
vendors' data sheets (SXM parts unless named). One table for the MFU counter
(`leviathan.device`), the roofline (`leviathan.cost.roofline`), the memory per job
and the plan (`leviathan.cost.plan`). Torch-free: the plan reads it at parse time."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class GPUModel:
    name: str
    keys: tuple[str, ...]  # all found (upper-cased) in a device name or a config's gpu_model
    bf16_flops: float  # dense tensor-core peak, FLOP/s (no sparsity)
    bandwidth: float  # HBM bytes/s
    memory: int  # bytes
    # L2 to SM bytes/s: not published; microbenchmarks of the H100 measure ~5.5 TB/s (the
    # H200 has the same die). None where no figure is at hand: no L2 term is charged.
    l2_bandwidth: float | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.memory / GIB:.0f} GB)"


# Matched in this order (the first model whose keys all occur wins): a plain "A100" is the
# 40 GB part (the smaller: a job that fits it fits both).
GPU_MODELS: tuple[GPUModel, ...] = (
    GPUModel("H200", ("H200",), 989e12, 4.8e12, 141 * GIB, 5.5e12),
    GPUModel("H100 PCIe", ("H100", "PCIE"), 756e12, 2.0e12, 80 * GIB),
    GPUModel("H100", ("H100",), 989e12, 3.35e12, 80 * GIB, 5.5e12),  # SXM, HBM3
    GPUModel("A100 80GB", ("A100", "80G"), 312e12, 2.039e12, 80 * GIB),
    GPUModel("A100 40GB", ("A100",), 312e12, 1.555e12, 40 * GIB),
    GPUModel("L40S", ("L40S",), 362e12, 0.864e12, 48 * GIB),
    GPUModel("A10G", ("A10G",), 70e12, 0.6e12, 24 * GIB),
)


def gpu_model(name: str | None) -> GPUModel | None:
    """The table's model for a device name (`torch.cuda.get_device_name`) or a config's
    `gpu_model` (`h100`, `a100_80gb`, ...); None where it is not known (never a guess)."""
    if not name:
        return None
    upper = str(name).upper()
    for model in GPU_MODELS:
        if all(k in upper for k in model.keys):
            return model
    return None


def require_gpu_model(name: str) -> GPUModel:
    model = gpu_model(name)
    if model is None:
        known = ", ".join(m.name for m in GPU_MODELS)
        raise ValueError(
            f"GPU model {name!r} is not in leviathan.gpus.GPU_MODELS ({known}): add it there"
        )
    return model

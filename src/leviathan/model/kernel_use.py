"""Which fused kernels this process may run, and what its self-check found.

The self-check (`leviathan.model.kernel_check`) runs once per process, before training or
evaluation starts. It hands its record to `adopt`: a kernel that failed is switched off here,
and the code that would launch it takes the plain torch ops instead. Two places read the
switches: LEV's path choice (`spline_product._resolve`, kernel "auto") and the loss
(`loss.uses_fused_kernels`, `loss.linear_cross_entropy`). `checked()` is the record that every
manifest and evaluation output of the process carries (`env.kernel_check`,
`leviathan.provenance.environment`), and that the report's status page reads.

No torch import here: provenance reads this module in data-only processes too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Every fused kernel the check knows, by the name its record uses.
LEV_TRITON_FORWARD = "lev_triton_forward"
LEV_TRITON_BACKWARD = "lev_triton_backward"
LOSS_TRITON_FORWARD = "loss_triton_forward"
LOSS_TRITON_BACKWARD = "loss_triton_backward"
LEV_NATIVE_FORWARD = "lev_native_forward"
LEV_NATIVE_BACKWARD = "lev_native_backward"
KERNELS = (
    LEV_TRITON_FORWARD,
    LEV_TRITON_BACKWARD,
    LOSS_TRITON_FORWARD,
    LOSS_TRITON_BACKWARD,
    LEV_NATIVE_FORWARD,
    LEV_NATIVE_BACKWARD,
)

# What a failed kernel does to the run (runtime.kernel_check): it is not used, with a WARNING
# ("warn"), or the run stops ("error")
CHECK_MODES = ("warn", "error")

# A kernel's status in a record: passed and in use; failed (not used: "failed: <error>");
# not run by this process's device or model (nothing to check).
OK = "ok"
FAILED = "failed"
NOT_USED = "not used"

# frozenset: torch.compile's tracer reads it as a constant (guarded), not a mutable global
_switched_off: frozenset[str] = frozenset()
_record: dict[str, Any] | None = None


def usable(kernel: str) -> bool:
    """Whether `kernel` may run: False once the self-check has found it wrong."""
    return kernel not in _switched_off


def failed(status: str) -> bool:
    return status.startswith(FAILED)


def adopt(record: Mapping[str, Any]) -> None:
    """Make a self-check's record this process's: its failed kernels switched off (and only
    those), the record kept for the manifests (`checked`)."""
    global _switched_off, _record
    kernels = record["kernels"]
    unknown = set(kernels) - set(KERNELS)
    if unknown:
        raise ValueError(f"unknown kernels {sorted(unknown)}: the check knows {list(KERNELS)}")
    _switched_off = frozenset(k for k, status in kernels.items() if failed(status))
    _record = {**record, "kernels": dict(kernels)}


def checked() -> dict[str, Any] | None:
    """The record of this process's self-check (None: no check ran)."""
    return None if _record is None else {**_record, "kernels": dict(_record["kernels"])}


def forget() -> None:
    """Every kernel usable again and no record (a process that starts over: tests)."""
    global _switched_off, _record
    _switched_off, _record = frozenset(), None

"""The compile-level report: every kernel's resources and hot loop per GPU architecture, and
its addresses bounded at every planned shape (`python -m leviathan.compiled`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from leviathan.compiled import kernels, ranges, sass
from leviathan.compiled.shapes import planned_shapes

# Per program, what the kernels are written to fit (an SM has 65,536 registers; at most 255
# a thread): LEV's forward two 8-warp programs per SM (128 registers), the others one
# program (255); no spills anywhere; shared memory within what one program may claim.
REGISTER_BUDGET = {
    "lev_forward": 128,
    "lev_backward": 255,
    "loss_forward": 255,
    "loss_backward": 255,
}
SHARED_BUDGET = {
    90: 232_448,
    80: 166_912,
}  # bytes a program may claim (sm_90: 227 KB, sm_80: 163 KB)


def _usage(kernel: str, shape: kernels.Shape, arch: int) -> dict[str, Any]:
    """Resources and hot loop; for LEV's kernels the SASS instructions per factor too (the
    cost model's `cost.lev_kernels.FORWARD_OPS_PER_FACTOR`, `BACKWARD_OPS_PER_FACTOR`)."""
    from leviathan.cost.lev_kernels import factors_per_step

    compiled = kernels.compiled(kernel, shape, arch)
    loop = sass.hot_loop(compiled)
    usage = {
        **asdict(sass.resources(compiled)),
        "hot_loop": {k: v for k, v in asdict(loop).items() if k != "opcodes"},
        "top_opcodes": dict(list(loop.opcodes.items())[:6]),
    }
    if kernel.startswith("lev") and shape.lev is not None:
        usage["sass_per_factor"] = loop.instructions / factors_per_step(kernel, shape.lev)
    return usage


def _addresses(kernel: str, shape: kernels.Shape) -> dict[str, Any]:
    launch = kernels.LAUNCHES[kernel](shape, kernels.ARCHES[0])
    compiled = kernels.compiled(kernel, shape, kernels.ARCHES[0])
    found = ranges.addresses(compiled.asm["ttir"], kernels.scalar_args(launch), launch[1])
    narrow = [a.interval[1] for a in found if a.dtype == "i32" and not a.problems]
    return {
        "shape": shape.label,
        "addresses": len(found),
        "largest_i32_offset": max(narrow, default=0),
        "problems": [f"TTIR line {a.line}: {p}" for a in found for p in a.problems],
    }


def reference_shape(shapes: list[kernels.Shape]) -> kernels.Shape:
    """The shape resources are reported at: the 400m leviathan training micro-batch."""
    return next(s for s in shapes if "400m/o200k_base/leviathan train" in s.label)


def report(root: str = ".") -> dict[str, Any]:
    shapes = planned_shapes(root=root)
    reference = reference_shape(shapes)
    usage = {
        f"sm_{arch}": {k: _usage(k, reference, arch) for k in kernels.KERNELS}
        for arch in kernels.ARCHES
    }
    checked = [
        _addresses(k, s) for s in shapes for k in kernels.KERNELS if s.lev or k.startswith("loss")
    ]
    import triton

    return {
        "triton": triton.__version__,
        "reference_shape": reference.label,
        "budgets": {"registers": REGISTER_BUDGET, "shared_bytes": SHARED_BUDGET},
        "usage": usage,
        "addresses": checked,
    }

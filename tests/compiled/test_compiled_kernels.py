"""The Triton kernels as a GPU runs them: compiled for sm_90 and sm_80 with no GPU, by the
Triton of the GPU image (constraints-gpu.txt, installed by `make venv` in .venv/triton-gpu),
with the JIT's specialisation, at every planned shape (`leviathan.compiled`).

What the interpreter tests cannot see: 32-bit address arithmetic, registers, spills, shared
memory, atomics, and the instructions the cost models charge. The compiles run in a
subprocess (this process has Triton imported interpreted, and at another version)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leviathan.compiled import ranges

ROOT = Path(__file__).resolve().parents[2]
GPU_TRITON = Path(os.environ.get("LEVIATHAN_GPU_TRITON", ROOT / ".venv" / "triton-gpu"))
PINNED = re.search(r"^triton==(\S+)", (ROOT / "constraints-gpu.txt").read_text(), re.M)

needs_gpu_triton = pytest.mark.skipif(
    not (GPU_TRITON / "triton").is_dir(),
    reason=f"the GPU image's Triton is not installed in {GPU_TRITON} (make venv installs it)",
)


def _run(code: str, tmp: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    paths = [str(GPU_TRITON), str(ROOT / "src"), *([str(tmp)] if tmp else [])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    out = _run(
        "from leviathan.compiled.report import report; import json; print(json.dumps(report()))"
    )
    return json.loads(out.splitlines()[-1])


@pytest.mark.slow  # ~20-90 s: the four kernels compiled to machine code for two GPUs
@needs_gpu_triton
def test_compiled_by_the_triton_the_gpu_image_pins(report: dict[str, Any]) -> None:
    assert PINNED and report["triton"] == PINNED.group(1)


@pytest.mark.slow
@needs_gpu_triton
def test_no_32_bit_offset_passes_2_31_at_any_planned_shape(report: dict[str, Any]) -> None:
    checked = report["addresses"]
    labels = {a["shape"] for a in checked}
    assert any("200m/o200k_base/leviathan train" in s for s in labels)  # the crash's shape
    assert any("7b" in s for s in labels)
    assert all(a["addresses"] > 0 for a in checked)
    problems = [f"{a['shape']}: {p}" for a in checked for p in a["problems"]]
    assert not problems, problems
    assert all(a["largest_i32_offset"] < 2**31 for a in checked)


@pytest.mark.slow
@needs_gpu_triton
def test_resources_within_the_stated_budgets_no_spills_no_atomics(report: dict[str, Any]) -> None:
    budgets = report["budgets"]
    for arch, kernels in report["usage"].items():
        assert set(kernels) == {"lev_forward", "lev_backward", "loss_forward", "loss_backward"}
        for name, usage in kernels.items():
            assert usage["registers"] <= budgets["registers"][name], (arch, name, usage)
            assert usage["spill_bytes"] == 0, (arch, name, usage)
            assert usage["shared_bytes"] <= budgets["shared_bytes"][arch[3:]], (arch, name)
            assert usage["atomics"] == 0, (arch, name)  # determinism is claimed for all four
        assert kernels["lev_backward"]["hot_loop"]["mma"] > 0  # its one-hot sums on tensor cores
        assert kernels["loss_forward"]["hot_loop"]["mma"] > 0


_WRAPPING_KERNEL = """
import triton
import triton.language as tl

@triton.jit
def store_rows(g_ptr, N, stride, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(g_ptr + rows * stride, rows.to(tl.float32), mask=rows < N)

@triton.jit
def store_rows_wide(g_ptr, N, stride, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(g_ptr + rows.to(tl.int64) * stride, rows.to(tl.float32), mask=rows < N)
"""

_CHECK = """
import json, torch, wrapping
from leviathan.compiled import kernels, ranges
out = {}
for fn in (wrapping.store_rows, wrapping.store_rows_wide):
    for n in (10_000, 16_384):
        g = torch.empty(n, 200_064, device="meta")
        launch = (fn, (n // 64,), (g, n, 200_064), {"BLOCK": 64})
        ttir = kernels.compile_launch(launch, 90).asm["ttir"]
        found = ranges.addresses(ttir, kernels.scalar_args(launch), launch[1])
        out[f"{fn.__name__} {n}"] = [list(a.problems) for a in found]
print(json.dumps(out))
"""


@pytest.mark.slow
@needs_gpu_triton
def test_the_bound_finds_the_row_times_stride_that_wraps(tmp_path: Path) -> None:
    """The check can fail: G's store as it was (int32 rows x the padded o200k stride) wraps
    from row 10,734 on, so 16,384 rows fail and 10,000 pass; in 64 bits both pass."""
    (tmp_path / "wrapping.py").write_text(_WRAPPING_KERNEL)
    found = json.loads(_run(_CHECK, tmp_path).splitlines()[-1])
    assert found["store_rows 10000"] == [[]]
    assert found["store_rows_wide 10000"] == found["store_rows_wide 16384"] == [[]]
    (problems,) = found["store_rows 16384"]
    assert len(problems) == 1 and "arith.muli" in problems[0] and "passes i32" in problems[0]
    assert str(16_383 * 200_064) in problems[0]


# the interval arithmetic alone, on TTIR as Triton 3.6 prints it (no compile)
_TTIR = """
    %c64_i32 = arith.constant 64 : i32 loc(#loc3)
    %rows = tt.get_program_id x : i32 loc(#loc86)
    %rows_3 = arith.muli %rows, %c64_i32 : i32 loc(#loc87)
    %rows_4 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32> loc(#loc88)
    %rows_5 = tt.splat %rows_3 : i32 -> tensor<64xi32> loc(#loc89)
    %rows_6 = arith.addi %rows_5, %rows_4 : tensor<64xi32> loc(#loc89)
    %c = arith.fptosi %x : tensor<64xf32> to tensor<64xi32> loc(#loc9)
    %c_1 = arith.maxsi %c, %zero : tensor<64xi32> loc(#loc9)
    %c_2 = arith.minsi %c_1, %k : tensor<64xi32> loc(#loc9)
    %o = arith.muli %rows_6, %stride : tensor<64xi32> loc(#loc1)
    %p = tt.addptr %base, %o : tensor<64x!tt.ptr<f32>>, tensor<64xi32> loc(#loc2)
    %q = tt.addptr %base, %c_2 : tensor<64x!tt.ptr<f32>>, tensor<64xi32> loc(#loc2)
    %r = tt.addptr %base, %c : tensor<64x!tt.ptr<f32>>, tensor<64xi32> loc(#loc2)
"""


def test_intervals_follow_the_grid_the_strides_and_the_clamps() -> None:
    env = {"stride": 1000, "zero": 0, "k": 15}
    p, q, r = ranges.addresses(_TTIR, env, (10,))
    assert p.interval == (0, 639 * 1000) and not p.problems
    assert q.interval == (0, 15) and not q.problems  # a float converted, then clamped
    assert r.problems == ("%c unbounded",)  # a float converted and used as it is
    (wide,) = ranges.addresses(_TTIR, {**env, "stride": 4_000_000}, (10,))[:1]
    assert wide.problems and "passes i32" in wide.problems[0]

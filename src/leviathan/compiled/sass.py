"""What a compiled kernel costs a GPU, read from its binary: registers, spilled bytes and
shared memory per program (cuobjdump's resource usage; Triton's metadata for the dynamic
shared memory), atomics (PTX), and the instructions its hot loop issues (the SASS).

The hot loop is the innermost loop (a backward branch with no other inside it) with the most
instructions: the walk over coordinates in LEV's kernels, the walk over the width in the
loss's. Its instruction count, divided by the work one iteration does per thread, is what
the cost models charge (`leviathan.cost.lev_kernels.cost_per_id`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_BRANCH = re.compile(r"0x([0-9a-f]+)")


@dataclass(frozen=True)
class Resources:
    """Per program of the compiled kernel."""

    registers: int  # per thread
    spill_bytes: int  # local memory per thread (stack + spill stores)
    shared_bytes: int  # static + dynamic
    warps: int
    atomics: int  # atom. and red. instructions in the PTX


@dataclass(frozen=True)
class HotLoop:
    """The innermost loop with the most instructions: its size and what it is made of."""

    instructions: int
    barriers: int  # BAR.SYNC: warps waiting for each other
    mma: int  # HMMA / HGMMA: tensor-core instructions
    opcodes: dict[str, int]


def _tool(name: str) -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name


def _dump(kernel: Any, flag: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        done = subprocess.run(
            [str(_tool("cuobjdump")), flag, str(cubin)], capture_output=True, text=True, check=True
        )
    return done.stdout


def resources(kernel: Any) -> Resources:
    """`kernel` (a Triton CompiledKernel)'s resources per program."""
    (line,) = [ln for ln in _dump(kernel, "--dump-resource-usage").splitlines() if "REG:" in ln]
    fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
    ptx = kernel.asm["ptx"]
    return Resources(
        registers=int(fields["REG"]),
        spill_bytes=int(fields["STACK"]) + int(fields["LOCAL"]),
        shared_bytes=int(fields["SHARED"]) + int(kernel.metadata.shared),
        warps=int(kernel.metadata.num_warps),
        atomics=len(re.findall(r"\b(?:atom|red)\.", ptx)),
    )


def instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of every instruction of a cuobjdump -sass listing."""
    return [(int(a, 16), op, rest) for a, _, op, rest in _LINE.findall(sass)]


def loops(listing: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """(first, last) address of every loop: a branch back to an earlier address."""
    found = []
    for address, op, rest in listing:
        target = _BRANCH.search(rest)
        if op.startswith("BRA") and target and int(target.group(1), 16) < address:
            found.append((int(target.group(1), 16), address))
    return found


def hot_loop(kernel: Any) -> HotLoop:
    """The kernel's innermost loop with the most instructions."""
    listing = instructions(_dump(kernel, "-sass"))
    spans = loops(listing)
    innermost = [
        s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)
    ]
    if not innermost:
        raise ValueError("no loop in the kernel's SASS")
    first, last = max(innermost, key=lambda s: s[1] - s[0])
    body = Counter(op for address, op, _ in listing if first <= address <= last)
    return HotLoop(
        instructions=sum(body.values()),
        barriers=sum(n for op, n in body.items() if op.startswith("BAR")),
        mma=sum(n for op, n in body.items() if op.startswith(("HMMA", "HGMMA"))),
        opcodes=dict(body.most_common()),
    )

"""Bounds of the integers a compiled kernel computes on its way to an address, from its TTIR.

Triton lowers `ptr + offset` to `tt.addptr` with the offset's own integer type: where the
offset is int32 (a block index times a stride, say), a product past 2^31 wraps and the load or
store lands elsewhere. The interpreter (numpy, 64-bit) never shows it. This module reads a
kernel's TTIR, gives every integer value an interval at one launch (its integer arguments and
grid known), and checks each address: its offset bounded, and no 32-bit value on the way
(the offset and everything it is computed from) outside the int32 range.

Intervals are plain interval arithmetic over the ops the kernels use: constants, program ids
(the grid), `make_range`, the shape ops, add, sub, mul, division and shifts by constants, min,
max, select, sign extension; a loop's induction variable spans its bounds. Anything else (a
value loaded from memory, a float converted, a loop-carried value) is unbounded, so a kernel
whose address depends on one fails the check until the kernel bounds it in integers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

INF = math.inf
Interval = tuple[float, float]
UNBOUNDED: Interval = (-INF, INF)
LIMITS = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}
_NAME = r"%[\w.$]+"
_ASSIGN = re.compile(rf"^\s*({_NAME})(?::\d+)?\s*=\s*([\w.]+)\s*(.*)$")
_FOR = re.compile(rf"scf\.for\s+({_NAME})\s*=\s*({_NAME})\s+to\s+({_NAME})\s+step\s+({_NAME})")
_ATTRS = re.compile(r"\{[^{}]*\}")
_ELEMENT = re.compile(r"(i\d+|f\d+|bf16|!tt\.ptr)")


@dataclass(frozen=True)
class Address:
    """One `tt.addptr` of the kernel at one launch: its TTIR line, the offset's type and
    interval, and what is wrong with it (empty: nothing)."""

    line: int
    offset: str
    dtype: str
    interval: Interval
    problems: tuple[str, ...]


@dataclass
class _Value:
    op: str
    operands: list[str]
    dtype: str
    interval: Interval


def _dtype(types: str, which: int = -1) -> str:
    """Element type of the `which`-th type in an op's type list ('tensor<64x1xi32>' -> i32)."""
    parts = [p for p in re.split(r"->|\bto\b|,(?![^<]*>)", types) if p.strip()]
    found = _ELEMENT.findall(parts[which]) if parts else []
    return "ptr" if found and found[-1] == "!tt.ptr" else (found[-1] if found else "")


def _mul(a: Interval, b: Interval) -> Interval:
    """Interval product; an end at 0 times an unbounded end is 0 (not NaN)."""
    products = [0 if 0 in (x, y) else x * y for x in a for y in b]
    return (min(products), max(products))


def _floor(x: float) -> float:
    return x if math.isinf(x) else math.floor(x)


def _const(value: _Value | None) -> float | None:
    if value is None or value.interval[0] != value.interval[1]:
        return None
    return value.interval[0]


def _binary(op: str, a: _Value, b: _Value) -> Interval:
    (alo, ahi), (blo, bhi), k = a.interval, b.interval, _const(b)
    if op == "arith.addi":
        return (alo + blo, ahi + bhi)
    if op == "arith.subi":
        return (alo - bhi, ahi - blo)
    if op == "arith.muli":
        return _mul(a.interval, b.interval)
    if op == "arith.minsi":
        return (min(alo, blo), min(ahi, bhi))
    if op == "arith.maxsi":
        return (max(alo, blo), max(ahi, bhi))
    if k is not None and k > 0 and op in ("arith.divsi", "arith.floordivsi"):
        return (_floor(alo / k), _floor(ahi / k))
    if k is not None and k > 0 and op == "arith.remsi":
        return (0, min(ahi, k - 1)) if alo >= 0 else (-(k - 1), k - 1)
    if k is not None and k >= 0 and op == "arith.andi":
        return (0, k)
    if k is not None and 0 <= k < 64 and op in ("arith.shli", "arith.shrsi"):
        scale = 2**k if op == "arith.shli" else 2.0**-k
        return (_floor(alo * scale), _floor(ahi * scale))
    return UNBOUNDED


_WRAPPING = ("arith.addi", "arith.subi", "arith.muli", "arith.shli", "arith.trunci")
_SHAPE_OPS = ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "ttg.convert_layout")
_EXTEND_OPS = ("arith.extsi", "arith.trunci", "arith.index_cast")


def _interval(
    op: str, rest: str, operands: list[_Value | None], env: Mapping[str, int]
) -> Interval:
    """The interval of an op's result (UNBOUNDED where the op is not modelled)."""
    known = [v for v in operands if v is not None]
    if op == "arith.constant":
        m = re.match(r"(?:dense<)?(-?\d+)(?:>)?\s*:\s*(?:tensor<[^>]*x)?i\d+", rest.strip())
        return (int(m.group(1)),) * 2 if m else UNBOUNDED
    if op == "tt.get_program_id":
        axis = "xyz".index(rest.split()[0])
        return (0, env[f"grid{axis}"] - 1)
    if op == "tt.make_range":
        lo, hi = (int(re.search(rf"{k} = (-?\d+)", rest).group(1)) for k in ("start", "end"))  # type: ignore[union-attr]
        return (lo, hi - 1)
    if op in _SHAPE_OPS + _EXTEND_OPS and known:
        return known[0].interval
    if op == "arith.select" and len(known) == 3:
        (alo, ahi), (blo, bhi) = known[1].interval, known[2].interval
        return (min(alo, blo), max(ahi, bhi))
    if len(operands) == 2 and len(known) == 2:
        return _binary(op, known[0], known[1])
    return UNBOUNDED


def _parse(
    ttir: str, env: Mapping[str, int]
) -> tuple[dict[str, _Value], list[tuple[int, str, str]]]:
    """Every SSA value of the kernel's function with its interval, and its addresses
    (line number, offset's name, offset's type)."""
    values: dict[str, _Value] = {}
    for name, value in env.items():
        if not name.startswith("grid"):
            values[f"%{name}"] = _Value("arg", [], "i32", (value, value))
    addresses = []
    for number, line in enumerate(ttir.splitlines(), 1):
        line = line.split(" loc(")[0]
        loop = _FOR.search(line)
        if loop:
            iv, lb, ub = loop.groups()[:3]
            lo, hi = values.get(lb), values.get(ub)
            span = (lo.interval[0] if lo else -INF, hi.interval[1] - 1 if hi else INF)
            values[iv] = _Value("scf.for", [lb, ub], "i32", span)
        assign = _ASSIGN.match(line)
        if not assign:
            continue
        result, op, rest = assign.groups()
        body = _ATTRS.sub("", rest)
        args, _, types = body.partition(" : ")
        names = re.findall(_NAME, args)
        dtype = _dtype(types, 1 if op == "tt.addptr" else -1)
        if op == "tt.addptr":
            addresses.append((number, names[1], dtype))
        interval = _interval(op, rest, [values.get(n) for n in names], env)
        values[result] = _Value(op, names, dtype, interval)
    return values, addresses


def _slice(values: Mapping[str, _Value], name: str) -> list[str]:
    """`name` and every value it is computed from, up to the loads (a loaded value's own
    address is an address of its own)."""
    seen, todo = [], [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in values:
            continue
        seen.append(current)
        if values[current].op != "tt.load":
            todo += values[current].operands
    return seen


def _problems(values: Mapping[str, _Value], offset: str) -> tuple[str, ...]:
    value = values.get(offset)
    if value is None or math.isinf(value.interval[0]) or math.isinf(value.interval[1]):
        return (f"{offset} unbounded",)
    out = []
    for name in _slice(values, offset):
        v = values[name]
        if v.op not in _WRAPPING:
            continue  # no wrap: a bound (min, max, select) or a conversion that saturates
        lo, hi = LIMITS.get(v.dtype, (-INF, INF))
        if v.interval[0] < lo or v.interval[1] > hi:
            out.append(
                f"{name} = {v.op} in [{v.interval[0]:.0f}, {v.interval[1]:.0f}] passes {v.dtype}"
            )
    return tuple(out)


def addresses(ttir: str, scalars: Mapping[str, int], grid: tuple[int, ...]) -> list[Address]:
    """Every address of the kernel at one launch (its integer arguments and grid), bounded."""
    env = {**scalars, **{f"grid{i}": g for i, g in enumerate((*grid, 1, 1)[:3])}}
    values, found = _parse(ttir, env)
    return [
        Address(
            number,
            offset,
            dtype,
            values[offset].interval if offset in values else UNBOUNDED,
            _problems(values, offset),
        )
        for number, offset, dtype in found
    ]

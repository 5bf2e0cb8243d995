"""A count of the bytes every kernel of a step reads and writes: what a GPU pays for.

`TrafficCounter` is a `TorchDispatchMode`: every ATen op that reaches it adds the bytes of its
tensor inputs (read) and of its tensor outputs (written) to a per-op record. Run it over
FakeTensors (`torch._subclasses.fake_tensor.FakeTensorMode`) and a step of the paper's
shapes is counted in seconds with no memory allocated and no GPU: the roofline
(`leviathan.cost.roofline`) is held to this count.

What it counts, and so what it is not:
  * one eager kernel per op, each reading its inputs once and writing its outputs once (no
    cache: a GPU's L2 may serve a small input that several kernels re-read; the caller
    says which tables stay there);
  * a tensor's bytes are its distinct elements (a broadcast stride-0 input counts once per
    element it really holds); views, reshapes and empty allocations move nothing;
  * an in-place op reads what it mutates and writes it back (`add_`, and the `_foreach_*_`
    ops that return nothing: what an op writes is what its schema marks as mutated plus its
    fresh outputs), except a plain `copy_`/`fill_`/`zero_` and an `out=` argument, which
    are only written;
  * a gather (`embedding`, `index`, `index_select`, `gather`) reads only the source elements
    it returns, and a scatter (`index_put_`, `index_add_`) reads and writes only the
    destination elements it touches (one per value), not the whole table or tensor.
Each record is attributed to a part: an explicit `part(name)` block wins; else
`part_of(parents)` maps the modules the op runs under (`torch.utils.module_tracker`, which
follows forward and backward alike) to a name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.module_tracker import ModuleTracker

aten = torch.ops.aten
# ops that allocate or describe memory without reading or writing element data
_NO_TRAFFIC = {
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_empty,
    aten.new_empty_strided,
    aten.detach,
    aten.alias,
    aten.lift_fresh,
    aten.set_,
    aten.resize_,
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
    aten.is_same_size,
    aten._unsafe_view,  # a view of a fresh result (reshape after a matmul): no kernel
}
# ops that read only the elements of their first argument (the source) that they return
_GATHERS = {aten.embedding, aten.index, aten.index_select, aten.gather}
# ops that read and write only the elements of their first argument that their values touch
_SCATTERS = {aten.index_put_, aten.index_add_}
# in-place ops that overwrite their destination without reading it
_WRITE_ONLY_DEST = {aten.copy_, aten.fill_, aten.zero_}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements `t` holds: a stride-0 (broadcast) dimension adds none."""
    distinct = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            distinct *= size
    return distinct * t.element_size()


@dataclass
class OpRecord:
    """Bytes read and written by the calls of one op within one part."""

    calls: int = 0
    read: int = 0
    written: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _read_written(func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """Bytes an op reads and bytes it writes (see the module docstring)."""
    schema, packet = func._schema, func.overloadpacket
    read, written = [], []
    for i, arg in enumerate(schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        tensors = _tensors(value)
        mutated = arg.alias_info is not None and arg.alias_info.is_write
        if mutated:
            written += tensors
        write_only = arg.name == "out" or (i == 0 and packet in _WRITE_ONLY_DEST)
        if not (mutated and write_only):
            read += tensors
    outs = out if isinstance(out, tuple | list) else (out,)
    for ret, value in zip(schema.returns, outs, strict=False):
        if ret.alias_info is None:  # a fresh result (an aliasing one is a mutated argument)
            written += _tensors(value)
    n_read, n_written = sum(map(tensor_bytes, read)), sum(map(tensor_bytes, written))
    source = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if source is not None and packet in _GATHERS:  # only the returned elements of the source
        n_read += out.numel() * source.element_size() - tensor_bytes(source)
    elif source is not None and packet in _SCATTERS:  # only the touched elements of self
        values = args[3] if packet is aten.index_add_ else args[2]
        touched = values.numel() * source.element_size() - tensor_bytes(source)
        n_read, n_written = n_read + touched, n_written + touched
    return n_read, n_written


class TrafficCounter(TorchDispatchMode):
    """Adds up the bytes each op reads and writes, per part and op (see the module docstring)."""

    def __init__(self, part_of: Callable[[set[str]], str] | None = None) -> None:
        super().__init__()
        self._part_of = part_of or (lambda parents: "all")
        self._forced: list[str] = []
        self._tracker = ModuleTracker()
        self._stack = ExitStack()
        self.records: dict[tuple[str, str], OpRecord] = defaultdict(OpRecord)

    def __enter__(self) -> TrafficCounter:
        self._stack.enter_context(self._tracker)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._stack.close()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Within the block every op counts towards `name`, whatever module it runs in."""
        self._forced.append(name)
        try:
            yield
        finally:
            self._forced.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if func.namespace == "prim" or func.is_view or packet in _NO_TRAFFIC:
            return out  # metadata (prim.device, ...), views and bare allocations
        read, written = _read_written(func, args, kwargs, out)
        part = self._forced[-1] if self._forced else self._part_of(set(self._tracker.parents))
        record = self.records[(part, str(packet))]
        record.calls += 1
        record.read += read
        record.written += written
        return out

    def by_part(self) -> dict[str, int]:
        """Total bytes (read + written) per part."""
        totals: dict[str, int] = defaultdict(int)
        for (part, _), record in self.records.items():
            totals[part] += record.total
        return dict(totals)

    def top(self, part: str, n: int = 10) -> list[tuple[str, OpRecord]]:
        """The `n` ops of `part` that move the most bytes, largest first (to see where it goes)."""
        ops = [(op, r) for (p, op), r in self.records.items() if p == part]
        return sorted(ops, key=lambda item: item[1].total, reverse=True)[:n]

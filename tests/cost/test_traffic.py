"""The traffic counter against bytes worked out by hand from each op's shapes, on FakeTensors."""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost.traffic import TrafficCounter, tensor_bytes


def test_a_matmul_reads_both_operands_and_writes_the_product() -> None:
    with FakeTensorMode():
        a, b = torch.empty(1000, 256), torch.empty(256, 512, dtype=torch.float32)
        with TrafficCounter() as counter:
            a @ b
    assert counter.by_part() == {"all": 4 * (1000 * 256 + 256 * 512) + 4 * 1000 * 512}


def test_views_and_allocations_move_nothing() -> None:
    with FakeTensorMode():
        a = torch.empty(64, 32)
        with TrafficCounter() as counter:
            a.view(32, 64).t().unsqueeze(0)
            torch.empty(10_000)
    assert counter.by_part() == {}


def test_a_broadcast_input_counts_its_distinct_elements() -> None:
    with FakeTensorMode():
        a, bias = torch.empty(1000, 256), torch.empty(256)
        with TrafficCounter() as counter:
            a + bias.expand(1000, 256)
    assert counter.by_part()["all"] == 4 * (1000 * 256 + 256) + 4 * 1000 * 256


def test_bf16_copy_reads_fp32_and_writes_half() -> None:
    with FakeTensorMode():
        a = torch.empty(4096)
        with TrafficCounter() as counter:
            a.to(torch.bfloat16)
    assert counter.by_part()["all"] == 4096 * 4 + 4096 * 2


def test_in_place_ops_read_what_they_change_but_copy_only_writes() -> None:
    with FakeTensorMode():
        a, b = torch.empty(1024), torch.empty(1024)
        with TrafficCounter() as counter:
            a.mul_(2.0)
        with TrafficCounter() as copy_counter:
            a.copy_(b)
    assert counter.by_part()["all"] == 2 * 4 * 1024
    assert copy_counter.by_part()["all"] == 2 * 4 * 1024  # b read, a written


def test_backward_is_attributed_to_the_module_it_differentiates() -> None:
    with FakeTensorMode():
        model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 8, bias=False))
        x = torch.empty(32, 64)

        def part_of(parents: set[str]) -> str:
            return "first" if any(p.endswith(".0") for p in parents) else "rest"

        with TrafficCounter(part_of) as counter:
            model(x).sum().backward()
    first = counter.top("first", n=100)
    # forward x @ W0^T and, in backward, grad W0 = g^T x: at least those two matmuls' bytes
    forward_mm = 4 * (32 * 64 + 128 * 64 + 32 * 128)
    assert sum(r.total for _, r in first) >= 2 * forward_mm
    assert counter.by_part()["rest"] > 0


def test_an_explicit_part_wins_over_the_module() -> None:
    with FakeTensorMode():
        a = torch.empty(100)
        with TrafficCounter(lambda parents: "module") as counter, counter.part("optimizer"):
            a.add_(1.0)
    assert set(counter.by_part()) == {"optimizer"}


def test_tensor_bytes_of_an_expanded_view() -> None:
    t = torch.zeros(3, 1).expand(3, 5)
    assert tensor_bytes(t) == 3 * 4


def test_a_foreach_update_writes_every_tensor_it_mutates() -> None:
    with FakeTensorMode():
        params, grads = [torch.empty(300), torch.empty(700)], [torch.empty(300), torch.empty(700)]
        with TrafficCounter() as counter:
            torch._foreach_add_(params, grads)
    # reads both lists, writes the first back (the op returns nothing)
    assert counter.by_part()["all"] == 4 * 1000 * 2 + 4 * 1000


def test_a_gather_reads_only_the_rows_it_returns() -> None:
    with FakeTensorMode():
        table, ids = torch.empty(50_000, 64), torch.zeros(100, dtype=torch.long)
        with TrafficCounter() as counter:
            torch.nn.functional.embedding(ids, table)
    # 100 rows of 64 fp32 read, the 100 ids read, the 100 x 64 output written
    assert counter.by_part()["all"] == 4 * 100 * 64 + 8 * 100 + 4 * 100 * 64


def test_a_scatter_touches_only_the_rows_it_adds_to() -> None:
    with FakeTensorMode():
        table, ids, rows = (
            torch.empty(50_000, 64),
            torch.zeros(10, dtype=torch.long),
            torch.empty(10, 64),
        )
        with TrafficCounter() as counter:
            table.index_add_(0, ids, rows)
    # the 10 rows read and written back, the ids and the added rows read
    assert counter.by_part()["all"] == 2 * 4 * 10 * 64 + 8 * 10 + 4 * 10 * 64

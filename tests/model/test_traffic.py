"""The traffic counter against bytes worked out by hand from each op's shapes, on FakeTensors."""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.model.traffic import TrafficCounter, tensor_bytes


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

"""The one table of GPU models: device names and config spellings find their data-sheet row."""

from __future__ import annotations

import pytest

from leviathan.gpus import GIB, gpu_model, require_gpu_model


@pytest.mark.parametrize(
    ("name", "model", "memory_gib"),
    [
        ("NVIDIA H100 80GB HBM3", "H100", 80),
        ("h100", "H100", 80),
        ("NVIDIA H100 PCIe", "H100 PCIe", 80),
        ("NVIDIA H200", "H200", 141),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB", 80),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", 40),
        ("a100", "A100 40GB", 40),  # the smaller part where the config does not say
        ("NVIDIA L40S", "L40S", 48),
    ],
)
def test_device_names_and_config_spellings_find_their_model(
    name: str, model: str, memory_gib: int
) -> None:
    found = gpu_model(name)
    assert found is not None
    assert found.name == model
    assert found.memory == memory_gib * GIB


def test_an_unknown_gpu_is_none_or_a_one_line_error() -> None:
    assert gpu_model("cpu") is None
    assert gpu_model(None) is None
    with pytest.raises(ValueError, match="leviathan.gpus.GPU_MODELS"):
        require_gpu_model("tpu v5")

"""The readable progress line (telemetry.ProgressLine) and its formats."""

from __future__ import annotations

from leviathan.train.telemetry import ProgressLine, format_duration, format_rate


def test_durations_read_as_a_person_writes_them() -> None:
    assert format_duration(45.2) == "45s"
    assert format_duration(12 * 60 + 5) == "12m05s"
    assert format_duration(3 * 3600 + 12 * 60 + 29) == "3h12m"
    assert format_duration(2 * 86400 + 3 * 3600 + 59) == "2d03h"
    assert format_duration(-3) == "0s"


def test_rates_get_a_k_or_m_suffix() -> None:
    assert format_rate(950.4) == "950"
    assert format_rate(412_345) == "412k"
    assert format_rate(1_254_000) == "1.25M"


def test_the_line_on_a_gpu_names_every_figure() -> None:
    line = ProgressLine(
        step=120,
        total=16000,
        loss=3.41249,
        lr=3e-4,
        tokens_per_s=412_345.0,
        mfu=0.3812,
        peak_memory=61_234_567_890,
        eta_s=3 * 3600 + 12 * 60 + 5,
    )
    assert str(line) == (
        "step 120/16000 | loss 3.412 | lr 3.0e-04 | 412k tok/s | MFU 38% | mem 61.2 GB | ETA 3h12m"
    )


def test_the_line_without_a_gpu_has_no_memory_and_an_unknown_mfu() -> None:
    line = ProgressLine(
        step=1,
        total=12,
        loss=10.9,
        lr=6e-5,
        tokens_per_s=950.0,
        mfu="unknown",
        peak_memory=None,
        eta_s=11.0,
    )
    assert str(line) == "step 1/12 | loss 10.900 | lr 6.0e-05 | 950 tok/s | MFU unknown | ETA 11s"

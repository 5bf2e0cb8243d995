"""How the plan writes counts and sizes: `1.21B` tokens, `13.4 GB` (decimal units)."""

from __future__ import annotations


def count_text(n: float) -> str:
    """A count with its decimal unit: 1.21B, 33.55M, 12.00k, 512."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{n:,.0f}"


def size_text(n: float) -> str:
    """Bytes with their decimal unit: 512 B, 13.4 GB."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError

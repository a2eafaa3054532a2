"""Formatting of report values: every missing value prints as an explicit ``n/a``."""

from __future__ import annotations

import math
from html import escape

NA = "n/a"


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def known(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


def num(v: float | None, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if v is not None and known(v) else NA


def pct(v: float | None, digits: int = 0) -> str:
    return f"{v * 100:.{digits}f}%" if v is not None and known(v) else NA


def usd(v: float | None) -> str:
    if v is None or not known(v):
        return NA
    if v == 0:
        return "$0"
    if abs(v) < 0.01:
        return f"${v:.5f}"
    if abs(v) < 100:
        return f"${v:.3f}"
    return f"${v:,.0f}"


def compact(v: float | None) -> str:
    """1234 -> 1.2k, 3_400_000 -> 3.4M."""
    if v is None or not known(v):
        return NA
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.1f}{suffix}"
    return f"{v:.0f}" if a >= 10 or v == int(v) else f"{v:.2f}"


def sort_key(v: float | None) -> str:
    """A ``data-sort`` attribute value: numbers sort numerically, n/a sorts last."""
    return "" if v is None or not known(v) else repr(float(v))

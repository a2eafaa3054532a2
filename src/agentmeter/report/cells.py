"""The cells the terminal tables share (report/scorecard_table.py, report/benchmark_tables.py):
numbers, dollars, tokens and percentages, ``n/a`` for what could not be computed (nothing
unknown is shown as zero), and configuration labels (the scripted model marked)."""

from __future__ import annotations

from agentmeter.records import is_scripted

NA = "n/a"


def _f(v: float | None, fmt: str = ".3f") -> str:
    return NA if v is None else format(v, fmt)


def _usd(v: float | None) -> str:
    if v is None:
        return NA
    return f"{v:.4f}" if abs(v) < 10 else f"{v:,.2f}"


def _tok(v: float | None) -> str:
    return NA if v is None else f"{v:,.0f}"


def _scripted_mark(label: str, scripted: bool) -> str:
    return label + (" [dim](scripted test model)[/dim]" if scripted else "")


def _pct(v: float | None) -> str:
    return NA if v is None else f"{v:.1%}"


def _label(label: str, model: str) -> str:
    return _scripted_mark(label, is_scripted(model))

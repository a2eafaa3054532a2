"""Notices: one-line messages for the user that are not errors, each said once per process.

Loaders and builders say what they ignored or replaced here (never with ``warnings.warn``,
whose text is Python's, repeated per call site and mangled on some backends). The CLI sets the
sink so notices print above its progress bar; without one they go to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

_seen: set[str] = set()
_sink: Callable[[str], None] | None = None


def set_sink(sink: Callable[[str], None] | None) -> None:
    global _sink
    _sink = sink


def notice(text: str) -> None:
    """Say ``text`` once (per process): to the sink the CLI set, else to stderr."""
    if text in _seen:
        return
    _seen.add(text)
    if _sink is not None:
        _sink(text)
    else:
        print(f"agentmeter: {text}", file=sys.stderr)

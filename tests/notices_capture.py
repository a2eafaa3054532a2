"""Capturing the notices (agentmeter.notices) said inside a block, each said afresh."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentmeter import notices


@contextmanager
def captured_notices() -> Iterator[list[str]]:
    """The notices said in the block, in order; ones said before the block are said again."""
    said: list[str] = []
    before = set(notices._seen)
    notices._seen.clear()
    notices.set_sink(said.append)
    try:
        yield said
    finally:
        notices.set_sink(None)
        notices._seen.update(before)

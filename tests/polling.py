"""Waiting for a condition instead of sleeping a fixed time (these machines are noisy)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], timeout: float = 15.0, interval: float = 0.05) -> bool:
    """True as soon as ``condition()`` holds; False if it still fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


async def eventually_async(condition: Callable[[], bool], timeout: float = 15.0,
                           interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True

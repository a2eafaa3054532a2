"""Capped capture of a process's output, with a truncation marker that keeps head and tail;
``strip_ansi`` for output that becomes a stored message."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from typing import Protocol

#: terminal escape sequences: CSI (colours, cursor moves: ESC [ ... final), OSC (titles,
#: hyperlinks: ESC ] ... BEL or ESC \\), and the two-byte ESC forms
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                      r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]")
#: control characters other than tab and newline (carriage returns are handled first)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def strip_ansi(text: str) -> str:
    """``text`` as a terminal would leave it to read: colour and other escape sequences and
    control characters removed; of a line rewritten with carriage returns (progress bars), the
    last version. For command output that becomes a stored error or status message."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            line = next((p for p in reversed(line.split("\r")) if p), "")
        lines.append(line)
    return _CONTROLS.sub("", "\n".join(lines))


class Proc(Protocol):
    """What output collection needs of a process: an asyncio subprocess, or an exec through
    the local zygote (zygote.py)."""

    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    async def wait(self) -> int: ...


class CappedBuffer:
    """Keeps the first half and the last half of ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 0)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        half = self.limit // 2
        if len(self._head) < self.limit - half:
            take = min(len(chunk), self.limit - half - len(self._head))
            self._head += chunk[:take]
            chunk = chunk[take:]
        if chunk and half:
            self._tail += chunk
            if len(self._tail) > half:
                del self._tail[: len(self._tail) - half]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace")
        dropped = self.total - len(self._head) - len(self._tail)
        marker = f"\n[... agentmeter: {dropped} bytes truncated ...]\n"
        return (
            bytes(self._head).decode("utf-8", "replace")
            + marker
            + bytes(self._tail).decode("utf-8", "replace")
        )


async def wait_drained(proc: Proc) -> int:
    """``proc.wait()`` for a process killed while its output was being collected: asyncio's wait
    also waits for its pipes to close, which a reader that stopped (its sink raised, the stream
    buffer full, reading paused) never sees; what is left in them is read and dropped."""

    async def drain(stream: asyncio.StreamReader | None) -> None:
        if stream is not None:
            with contextlib.suppress(Exception):
                while await stream.read(1 << 16):
                    pass

    _, _, code = await asyncio.gather(drain(proc.stdout), drain(proc.stderr), proc.wait())
    return code


async def collect_output(proc: Proc, stdin: bytes | None, out: CappedBuffer,
                         err: CappedBuffer, on_stdout: Callable[[bytes], None] | None) -> int:
    """Feed ``stdin``, capture stdout/stderr into the buffers (stdout chunks also go to
    ``on_stdout``) and return the exit code. Used by every backend's ``exec``."""

    async def pump(stream: asyncio.StreamReader | None, buf: CappedBuffer,
                   cb: Callable[[bytes], None] | None) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            buf.feed(chunk)
            if cb is not None:
                cb(chunk)

    async def feed() -> None:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    await asyncio.gather(feed(), pump(proc.stdout, out, on_stdout), pump(proc.stderr, err, None))
    return await proc.wait()

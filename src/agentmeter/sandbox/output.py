"""Capped capture of a process's output, with a truncation marker that keeps head and tail."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


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


async def collect_output(proc: asyncio.subprocess.Process, stdin: bytes | None, out: CappedBuffer,
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

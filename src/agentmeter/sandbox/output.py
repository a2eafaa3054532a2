"""Capped capture of a process's output, with a truncation marker that keeps head and tail."""

from __future__ import annotations


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

"""Bounded copies out of a sandbox: the byte-counting sinks on the host (copyout.py runs the
copies, untar.py extracts them).

Sandbox-controlled data never reaches the host unbounded: the host counts what arrives, stops
(the backend kills the exec) once the cap is crossed and writes nothing. A copy is streamed to a
temporary host file, never held whole in memory, and is extracted only when complete and under
its cap.
"""

from __future__ import annotations

import tempfile
from typing import BinaryIO

from agentmeter.sandbox.spec import SandboxError

#: the default cap of ``read_file`` (a reward file's is smaller still)
READ_FILE_MAX_BYTES = 1 << 20
#: the default cap of ``copy_out`` (its tar stream)
COPY_OUT_MAX_BYTES = 64 << 20


class CopyTooLarge(SandboxError):
    """A copy or read out of a sandbox crossed its byte cap; nothing was written."""


class CappedBytes:
    """An ``on_stdout`` sink keeping at most ``max_bytes`` in memory; raises CopyTooLarge past it
    (raised inside the exec's reader, so the backend kills the exec)."""

    def __init__(self, what: str, max_bytes: int) -> None:
        self.what, self.max_bytes = what, max_bytes
        self.data = bytearray()

    def __call__(self, chunk: bytes) -> None:
        if len(self.data) + len(chunk) > self.max_bytes:
            raise CopyTooLarge(f"{self.what}: larger than the {self.max_bytes} bytes allowed")
        self.data += chunk


class CappedFile:
    """An ``on_stdout`` sink streaming to a temporary host file while counting; raises
    CopyTooLarge once past ``max_bytes``. Close it (or use it as a context manager) to delete
    the file."""

    def __init__(self, what: str, max_bytes: int) -> None:
        self.what, self.max_bytes = what, max_bytes
        self.size = 0
        self.file: BinaryIO = tempfile.TemporaryFile(prefix="agentmeter-copy-")  # noqa: SIM115

    def __call__(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise CopyTooLarge(f"{self.what}: larger than the {self.max_bytes} bytes allowed")
        self.file.write(chunk)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> CappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

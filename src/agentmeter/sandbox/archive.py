"""Bounded copies out of a sandbox: the commands run inside, the byte-counting sinks on the host,
and safe extraction of the tar streams (copy_out) and file reads (read_file).

Sandbox-controlled data never reaches the host unbounded: the command inside stops its stream
one byte past the cap (``head -c``), and the host counts what arrives, stops (the backend kills
the exec) once the cap is crossed and writes nothing. A copy is streamed to a temporary host
file, never held whole in memory, and is extracted only when complete and under its cap.
"""

from __future__ import annotations

import os
import shlex
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from agentmeter.sandbox import fsnames
from agentmeter.sandbox.fsnames import remove_tree
from agentmeter.sandbox.spec import SandboxError

#: the default cap of ``read_file`` (a reward file's is smaller still)
READ_FILE_MAX_BYTES = 1 << 20
#: the default cap of ``copy_out`` (its tar stream)
COPY_OUT_MAX_BYTES = 64 << 20
#: exit status of the in-sandbox read command when the file does not exist
NO_SUCH_FILE = 44


class CopyTooLarge(SandboxError):
    """A copy or read out of a sandbox crossed its byte cap; nothing was written."""


def tar_out_argv(src: str, exclude: Sequence[str], max_bytes: int) -> list[str]:
    """A command run inside a sandbox that writes a tar of ``src`` to stdout: a directory's
    contents, or a file under its own name; ``exclude`` are tar ``--exclude`` patterns. The
    stream stops after ``max_bytes + 1`` bytes, so a huge or sparse file costs no more."""
    excludes = " ".join(f"--exclude={shlex.quote(p)}" for p in exclude)
    tar = (f'if [ -d "$1" ]; then tar -c {excludes} -C "$1" .; '
           f'else tar -c {excludes} -C "$(dirname -- "$1")" -- "$(basename -- "$1")"; fi')
    tar = f"{{ {tar}; }} | head -c {max_bytes + 1}"
    return ["sh", "-c", f'[ -e "$1" ] || {{ echo "no such file or directory" >&2; exit 1; }}; {tar}',
            "sh", src]


def read_argv(path: str, max_bytes: int) -> list[str]:
    """A command run inside a sandbox that writes at most ``max_bytes + 1`` bytes of the regular
    file ``path`` to stdout, or exits ``NO_SUCH_FILE``."""
    return ["sh", "-c", f'[ -f "$1" ] || exit {NO_SUCH_FILE}; exec head -c {max_bytes + 1} -- "$1"',
            "sh", path]


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


def extract_capped(sink: CappedFile, dest: Path) -> list[str]:
    """Extract the complete tar stream in ``sink`` into the directory ``dest`` (see
    ``extract_safely``); an empty stream is an error."""
    if sink.size == 0:
        raise SandboxError(f"{sink.what}: tar wrote nothing")
    sink.file.flush()
    sink.file.seek(0)
    return extract_safely(sink.file, dest, sink.what, sink.max_bytes)


def extract_safely(fileobj: BinaryIO, dest: Path, what: str, max_bytes: int) -> list[str]:
    """Extract a tar stream into ``dest``. Members that would land or point outside ``dest``
    (absolute or escaping links, device files, ``..`` paths) are skipped, not followed; returns
    their names. Members whose sizes add up past ``max_bytes`` (sparse entries) refuse the whole
    copy. Members deeper than ``fsnames.CAPS.depth + 1`` levels are skipped too. Extraction goes to
    a scratch directory first: on any failure nothing is written."""
    skipped: list[str] = []
    # one level past the listing depth cap (so a reader sees something was cut): beyond it
    # the safety filter's path checks (an lstat per component of each) grow as depth cubed
    max_depth = fsnames.CAPS.depth + 1
    try:
        with tarfile.open(fileobj=fileobj, mode="r:") as tar:
            members = []
            for m in tar.getmembers():
                if sum(1 for p in m.name.split("/") if p not in ("", ".")) > max_depth:
                    skipped.append(m.name)
                else:
                    members.append(m)
            if sum(m.size for m in members if m.isfile()) > max_bytes:
                raise CopyTooLarge(f"{what}: its files hold more than the {max_bytes} bytes "
                                   "allowed")

            def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
                try:
                    return tarfile.data_filter(member, path)
                except tarfile.FilterError:
                    skipped.append(member.name)
                    return None

            dest.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=".agentmeter-extract-", dir=dest.parent))
            try:
                tar.extractall(scratch, members=members, filter=keep)
                _merge(scratch, dest)
            finally:
                remove_tree(scratch)  # what a failed extraction left, of any depth
    except (tarfile.TarError, EOFError) as e:
        raise SandboxError(f"{what}: not a readable tar stream: {e}") from e
    return skipped


def _merge(src: Path, dest: Path) -> None:
    """Move ``src``'s content into ``dest`` (created), replacing what is there; directories on
    both sides are merged (without recursion: the tree is a sandbox's, of any depth)."""
    pairs = [(src, dest)]
    while pairs:
        s, d = pairs.pop()
        d.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(s):
            target = d / entry.name
            if entry.is_dir(follow_symlinks=False) and target.is_dir() and not target.is_symlink():
                pairs.append((Path(entry.path), target))
            else:
                if target.is_dir() and not target.is_symlink():
                    remove_tree(target)
                os.replace(entry.path, target)

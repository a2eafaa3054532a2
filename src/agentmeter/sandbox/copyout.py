"""Copies out of a sandbox that the sandbox's image cannot subvert (both backends).

Every copy runs the host's static busybox (hosttools.static_busybox), which each backend puts
read-only at a fixed path inside the sandbox, by that absolute path with an argument vector: no
shell, no PATH lookup, nothing of the image runs. It runs as the user asked for, by default the
agent's, so a path the agent replaced by a symlink reads nothing the agent could not read. A
path that is a symlink or runs through one is refused, never followed: ``realpath`` must give
the path back, and tar stores a symlink at the top as the link itself (then refused). The tar
stream is counted on the host and extracted by untar.py, which trusts none of it.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import tarfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from agentmeter.sandbox import untar
from agentmeter.sandbox.archive import CappedBytes, CappedFile, CopyTooLarge
from agentmeter.sandbox.spec import SandboxError

#: runs ``busybox ARGS`` inside the sandbox as ``user``, its stdout into the sink; returns
#: (exit status, stderr)
BusyboxRun = Callable[[list[str], str, Callable[[bytes], None]], Awaitable[tuple[int, str]]]

#: where the host's static busybox is bind-mounted (read-only) in a sandbox: a mount point
#: directly in /dev (a tmpfs of the sandbox's, mode 0755), which root inside can neither write,
#: rename nor unlink (its name must start with "busybox": busybox runs the applet it is named)
BUSYBOX = "/dev/busybox-agentmeter"
#: the listing of a copy with ``exclude`` patterns (names of what is kept) is capped at this
LISTING_MAX_BYTES = 16 << 20
#: a tar invocation's names take at most this many bytes of its argument vector
ARGV_CHUNK_BYTES = 96 << 10
#: read_file: what the tar stream may hold beyond the file's own bytes (headers, padding)
_TAR_OVERHEAD = 64 << 10


class CopyNotes(list[str]):
    """``copy_out``'s notes, and what the copied path was by the stream itself (untar's
    ``Result.top_kind``: "dir" or "file"), so a caller needs no program of the image to know."""

    top_kind: str | None = None


def _split(path: str, what: str) -> tuple[str, str, str]:
    """(normalised absolute path, its parent, its name)."""
    norm = posixpath.normpath(path)
    if not norm.startswith("/") or norm.startswith("//") or norm == "/":
        raise SandboxError(f"{what}: needs an absolute path below /, not {path!r}")
    parent, name = posixpath.split(norm)
    return norm, parent, name


async def _check_no_link(run: BusyboxRun, path: str, user: str, what: str) -> None:
    """Refuse ``path`` when it is a symlink or one of its directories is."""
    sink = CappedBytes(what, 64 << 10)
    code, err = await run(["realpath", path], user, sink)
    if code != 0:
        raise SandboxError(f"{what}: {_no_such(err) or err.strip() or 'realpath failed'}")
    resolved = bytes(sink.data)
    if resolved != path.encode("utf-8", "surrogateescape") + b"\n":
        shown = resolved.decode("utf-8", "backslashreplace").strip()
        raise SandboxError(f"{what}: {path} is a symbolic link or runs through one (to {shown}):"
                           " not followed, not copied")


def _no_such(err: str) -> str | None:
    return "no such file or directory" if "No such file" in err else None


def _tar_chunks(names: list[str]) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    size = 0
    for n in names:
        b = len(n.encode("utf-8", "surrogateescape")) + 1
        if chunks[-1] and size + b > ARGV_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(n)
        size += b
    return chunks


async def copy_out(run: BusyboxRun, src: str, host_dst: Path, *, user: str,
                   exclude: Sequence[str], max_bytes: int) -> list[str]:
    """Copy ``src`` (a file or a tree) into the directory ``host_dst``; returns notes on what
    was left out. See the module docstring and ``Sandbox.copy_out``."""
    what = f"copy_out {src}"
    path, parent, name = _split(src, what)
    await _check_no_link(run, path, user, what)
    if exclude:
        # busybox tar has no --exclude: list what is kept (find prunes the excluded names),
        # then tar exactly those, without recursion
        listing = CappedBytes(f"{what}: listing", LISTING_MAX_BYTES)
        args = ["find", path, "-mindepth", "1", "("]
        for i, pat in enumerate(exclude):
            args += (["-o"] if i else []) + ["-name", pat]
        args += [")", "-prune", "-o", "-print0"]
        await run(args, user, listing)  # unreadable directories: what was listed is copied
        prefix = (path + "/").encode("utf-8", "surrogateescape")
        names = [name] + [name + "/" + e[len(prefix):].decode("utf-8", "surrogateescape")
                          for e in bytes(listing.data).split(b"\0") if e.startswith(prefix)]
        commands = [["tar", "-c", "-f", "-", "--no-recursion", "-C", parent, "--", *chunk]
                    for chunk in _tar_chunks(names)]
    else:
        commands = [["tar", "-c", "-f", "-", "-C", parent, "--", name]]
    notes: list[str] = []
    with CappedFile(what, max_bytes) as sink:
        for cmd in commands:
            code, err = await run(cmd, user, sink)
            if code != 0:
                lines = [ln for ln in err.strip().splitlines() if "delayed from previous" not in ln]
                notes += [f"{what}: {ln.removeprefix('tar: ')}" for ln in lines[:20]]
        if sink.size == 0:
            raise SandboxError(notes[0] if notes else f"{what}: tar wrote nothing")
        sink.file.flush()
        sink.file.seek(0)
        res = await asyncio.to_thread(untar.extract, sink.file, host_dst, what=what,
                                      max_bytes=max_bytes, top=name, exclude=exclude,
                                      concatenated=len(commands) > 1)
    if res.top_kind is None:  # tar said why (missing, unreadable)
        raise SandboxError(notes[0] if notes else f"{what}: no such file or directory")
    if res.top_kind == "symlink":
        raise SandboxError(f"{what}: {path} is a symbolic link: not followed, not copied")
    out = CopyNotes(notes + [f"{what}: {n}" for n in res.notes])
    out.top_kind = res.top_kind
    return out


async def read_file(run: BusyboxRun, path: str, *, user: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (else CopyTooLarge)."""
    what = f"read_file {path}"
    norm, parent, name = _split(path, what)
    await _check_no_link(run, norm, user, what)
    sink = _ReadSink(what, max_bytes)
    code, err = await run(["tar", "-c", "-f", "-", "-C", parent, "--", name], user, sink)
    try:
        with tarfile.open(fileobj=io.BytesIO(sink.data), mode="r:") as tar:
            member = tar.next()
            if member is None or member.name.rstrip("/") != name:
                raise SandboxError(f"{what}: {_no_such(err) or err.strip() or 'nothing read'}")
            if member.issym() or member.islnk():
                raise SandboxError(f"{what}: a symbolic link: not followed")
            if not member.isreg():
                raise SandboxError(f"{what}: not a regular file")
            if member.size > max_bytes:
                raise CopyTooLarge(f"{what}: larger than the {max_bytes} bytes allowed")
            f = tar.extractfile(member)
            assert f is not None
            data = f.read()
    except (tarfile.TarError, EOFError) as e:
        raise SandboxError(f"{what}: {_no_such(err) or f'unreadable: {e}'}") from e
    if code != 0 or len(data) != member.size:
        raise SandboxError(f"{what}: {err.strip() or 'incomplete'}")
    return data


class _ReadSink(CappedBytes):
    """read_file's stream: the file plus its tar headers; past the file's cap, CopyTooLarge."""

    def __init__(self, what: str, max_bytes: int) -> None:
        super().__init__(what, max_bytes + _TAR_OVERHEAD)
        self.file_cap = max_bytes

    def __call__(self, chunk: bytes) -> None:
        if len(self.data) + len(chunk) > self.max_bytes:
            raise CopyTooLarge(f"{self.what}: larger than the {self.file_cap} bytes allowed")
        self.data += chunk

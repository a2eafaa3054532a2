"""The file operations both backends' sandboxes share (``SandboxFiles``): paths relative to the
sandbox's workdir, reads and copies out through the host's busybox (``copyout.py``), the
archive ``copy_in`` sends (``copy_in_archive``: owned by the user asked for, whoever owns the
files on the host) and the script ``write_file`` runs (``WRITE_SCRIPT``). A backend supplies
``workdir``, ``_busybox`` (run the busybox by its absolute path as a user, stdout into a sink)
and how it unpacks the archive (the local backend as the copy's user, the docker backend as
root keeping the owners written into the archive).
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from agentmeter.sandbox import copyout, droppings
from agentmeter.sandbox.archive import COPY_OUT_MAX_BYTES, READ_FILE_MAX_BYTES
from agentmeter.sandbox.protocol import OutputCallback
from agentmeter.sandbox.spec import AGENT_USER, SandboxError

#: write_file inside: $1 the path (its directories made), stdin the bytes, $2 the mode (octal),
#: $3 if given the owner (a backend writing as root gives the file to the user asked for)
WRITE_SCRIPT = ('mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'
                ' && { [ -z "$3" ] || chown "$3" "$1"; }')


def copy_in_archive(host_src: Path, name: str, *, uid: int, gid: int, top: bool) -> bytes:
    """The tar stream ``copy_in`` unpacks: ``host_src`` (a file, stored as ``name``; or a
    directory: stored as ``name/...`` with ``top``, else its contents at the archive's top),
    every member owned by ``uid``:``gid`` whatever owns it on the host, the host's bytecode
    caches left out (droppings.py)."""
    if not host_src.exists():
        raise SandboxError(f"copy_in: {host_src} does not exist")

    def own(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
        return ti

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if not host_src.is_dir():
            tar.add(host_src, arcname=name, recursive=False, filter=own)
        else:
            if top:
                tar.add(host_src, arcname=name, recursive=False, filter=own)
            prefix = f"{name}/" if top else ""
            for p in droppings.walk(host_src):
                tar.add(p, arcname=prefix + p.relative_to(host_src).as_posix(), recursive=False,
                        filter=own)
    return buf.getvalue()


class SandboxFiles(ABC):
    """What both backends' sandboxes do alike with files (see module doc); a backend's sandbox
    supplies its workdir and its busybox exec."""

    @property
    @abstractmethod
    def workdir(self) -> str: ...

    def _abs(self, path: str) -> str:
        """``path`` inside the sandbox: a relative one is relative to the workdir."""
        return posixpath.normpath(posixpath.join(self.workdir, path))

    @abstractmethod
    async def _busybox(self, args: list[str], user: str,
                       sink: OutputCallback) -> tuple[int, str]:
        """``busybox ARGS`` as ``user`` (by its absolute path: no shell, no PATH lookup), its
        stdout into ``sink``; when the sink raises (its cap crossed) the exec is killed and the
        error raised. Returns (exit status, stderr)."""

    async def read_file(self, path: str, *, max_bytes: int = READ_FILE_MAX_BYTES,
                        user: str | None = None) -> bytes:
        return await copyout.read_file(self._busybox, self._abs(path), user=user or AGENT_USER,
                                       max_bytes=max_bytes)

    async def copy_out(self, src: str, host_dst: Path, *, exclude: Sequence[str] = (),
                       max_bytes: int = COPY_OUT_MAX_BYTES, user: str | None = None) -> list[str]:
        return await copyout.copy_out(self._busybox, self._abs(src), host_dst,
                                      user=user or AGENT_USER, exclude=exclude,
                                      max_bytes=max_bytes)

"""Safe extraction of tar streams that came out of a sandbox (copy_out)."""

from __future__ import annotations

import io
import shlex
import tarfile
from collections.abc import Sequence
from pathlib import Path

from agentmeter.sandbox.spec import SandboxError


def tar_out_argv(src: str, exclude: Sequence[str] = (), max_bytes: int | None = None) -> list[str]:
    """A command run inside a sandbox that writes a tar of ``src`` to stdout: a directory's
    contents, or a file under its own name; ``exclude`` are tar ``--exclude`` patterns. With
    ``max_bytes`` the stream stops after ``max_bytes + 1`` bytes (see ``check_size``), so a
    huge or sparse file costs the host no more than that."""
    excludes = " ".join(f"--exclude={shlex.quote(p)}" for p in exclude)
    tar = (f'if [ -d "$1" ]; then tar -c {excludes} -C "$1" .; '
           f'else tar -c {excludes} -C "$(dirname -- "$1")" -- "$(basename -- "$1")"; fi')
    if max_bytes is not None:
        tar = f"{{ {tar}; }} | head -c {max_bytes + 1}"
    return ["sh", "-c", f'[ -e "$1" ] || {{ echo "no such file or directory" >&2; exit 1; }}; {tar}',
            "sh", src]


def check_size(data: bytes, src: str, max_bytes: int | None) -> None:
    """Refuse a copy that reached its cap (``tar_out_argv``'s stream was cut)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise SandboxError(f"copy_out {src}: larger than the {max_bytes} bytes allowed")
    if not data:
        raise SandboxError(f"copy_out {src}: tar wrote nothing")


def extract_safely(data: bytes, dest: Path) -> list[str]:
    """Extract ``data`` into ``dest``. Members that would land or point outside ``dest``
    (absolute or escaping links, device files, ``..`` paths) are skipped, not followed;
    returns their names."""
    skipped: list[str] = []
    dest.mkdir(parents=True, exist_ok=True)

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError:
            skipped.append(member.name)
            return None

    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter=keep)
    return skipped

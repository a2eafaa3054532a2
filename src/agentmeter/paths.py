"""Where agentmeter keeps things on the host, and how a file there is written whole."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """Built bases and layers: ``$AGENTMETER_HOME`` or ``~/.cache/agentmeter``."""
    env = os.environ.get("AGENTMETER_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agentmeter"


def default_runs_dir() -> Path:
    """Runs (database and artifacts): ``$AGENTMETER_RUNS`` or ``./.agentmeter``."""
    env = os.environ.get("AGENTMETER_RUNS")
    return Path(env).expanduser().resolve() if env else Path.cwd() / ".agentmeter"


def write_atomic(path: Path, data: bytes | str, *, dir_mode: int = 0o777) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, renamed into place (a
    reader never sees half a file; a failed write leaves the old one). Text is UTF-8."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.part-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def realpath(path: str | os.PathLike[str]) -> Path | None:
    """``path`` with every symbolic link followed, or None when that cannot be known. Python
    3.11's ``os.path.realpath`` / ``Path.resolve()`` (non-strict) take a component they cannot
    ``lstat`` (``ENAMETOOLONG`` once the path passes PATH_MAX, ``ELOOP``) for a plain name and
    go on lexically: a chain of links (CVE-2025-4517's trick) then "resolves" inside a
    directory while the kernel follows it out. Here such an error means "unknown" (a caller
    confining a path refuses it); a missing component resolves as far as it exists, as the
    non-strict form does (the kernel stops there too)."""
    try:
        return Path(os.path.realpath(path, strict=True))
    except (FileNotFoundError, NotADirectoryError):
        return Path(os.path.realpath(path))
    except OSError:
        return None


def within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """``path`` (links followed, :func:`realpath`) is ``root`` or lies below it."""
    target, top = realpath(path), realpath(root)
    return target is not None and top is not None and (target == top or top in target.parents)

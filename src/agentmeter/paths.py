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

"""The private directory of a gateway's Unix socket, named after its owner process.

``<tmp>/agentmeter-gw-<pid>-<start time>-<random>``: a runner killed with SIGKILL cannot remove
its own, so every new one first removes those whose owner (pid and start time, so a reused pid
does not count) is gone. The directory is created 0700, as ``mkdtemp`` does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from agentmeter.procinfo import start_time

PREFIX = "agentmeter-gw-"


def owner_alive(name: str) -> bool:
    """Whether the process that created the directory ``name`` still runs (unknown: yes)."""
    pid, _, rest = name[len(PREFIX):].partition("-")
    start, _, _ = rest.partition("-")
    if not pid.isdigit() or not start.isdigit():
        return True  # not named by this module: not ours to judge
    return start_time(int(pid)) == start


def remove_stale(top: Path | None = None) -> list[Path]:
    """Remove the socket directories of dead owners; returns them."""
    top = top or Path(tempfile.gettempdir())
    removed = []
    try:
        entries = list(top.iterdir())
    except OSError:
        return []
    for p in entries:
        if p.name.startswith(PREFIX) and p.is_dir() and not p.is_symlink() \
                and p.stat().st_uid == os.getuid() and not owner_alive(p.name):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def make(top: Path | None = None) -> Path:
    """A new private socket directory of this process (after removing dead owners' ones)."""
    top = top or Path(tempfile.gettempdir())
    remove_stale(top)
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start_time(pid) or 0}-", dir=top))

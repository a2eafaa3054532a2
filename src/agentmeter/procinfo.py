"""A process's identity beyond its pid: a shared utility (the gateway's socket directories and
the docker containers' owner labels tell a live owner from a reused pid with it)."""

from __future__ import annotations


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, from ``/proc``), or None
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None

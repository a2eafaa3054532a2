"""Killing the processes of one ``docker exec``: every process whose environment holds the
exec's marker is stopped then killed, from inside the container or from the host.
"""

from __future__ import annotations

import contextlib
import os
import signal

#: run inside as the exec's user and as root: SIGSTOP then SIGKILL every process whose environment
#: holds the marker. Bash builtins only, so it needs no fork (a pids limit may be exhausted). Up
#: to 64 rounds (each a scan of /proc; it ends at the first that finds none): on a loaded machine
#: a killed process can still be exiting, its environment readable, for several scans.
KILL_MARKED = r"""
for ((round = 0; round < 64; round++)); do
  found=
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    while IFS= read -r -d '' v; do
      if [ "$v" = "$1" ]; then kill -STOP "$p"; found="$found $p"; break; fi
    done 2>/dev/null < "$e"
  done
  [ -z "$found" ] && exit 0
  kill -KILL $found 2>/dev/null
done
"""


def kill_marked_on_host(marker: bytes, container_id: str) -> int:
    """Stop then kill, from the host, the processes of the container holding ``marker``."""
    killed = 0
    for _ in range(64):  # as KILL_MARKED: a killed process may take several scans to go
        found: list[int] = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/cgroup") as f:
                    if container_id not in f.read():
                        continue
                os.kill(int(entry), signal.SIGSTOP)
            except OSError:
                continue
            found.append(int(entry))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
    return killed

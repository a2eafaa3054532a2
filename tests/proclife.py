"""Whether a process is still running, named by its pid *and* its start time: a pid alone may
name another process once the first has died (pid_max is 32768 on these machines and a full
suite starts many thousands of processes, so pids are reused within a run)."""

from __future__ import annotations

import subprocess

from agentmeter.procinfo import start_time


def identity(pid: int) -> tuple[int, str] | None:
    """``(pid, start time)`` of a live process, or None when there is no process ``pid``."""
    started = start_time(pid)
    return None if started is None else (pid, started)


def running(pid: int, started: str) -> bool:
    """The process ``pid`` that started at ``started`` is still running: the same pid with the
    same start time, and not a zombie (dead, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return False
    return len(fields) > 19 and fields[19] == started and fields[0] != "Z"


def end(proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace: float = 30.0) -> None:
    """End a server a fixture started: SIGTERM, then SIGKILL if it has not exited after
    ``grace`` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

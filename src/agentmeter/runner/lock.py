"""The run lock: one live process runs a run at a time.

A second ``run --run-id R`` or ``resume R`` while R's first runner is alive would run the same
trials twice and close the live runner's tries as interrupted. The lock is an exclusive
``flock`` on ``<run dir>/run.lock``, held for the whole run; the kernel releases it when its
owner dies in any way (SIGKILL included), so a dead owner never blocks a resume and nothing has
to judge staleness. The file also says who holds it (pid, host, since), for the refusal message.

The lock lives beside the run's artifacts, so it covers every process that shares that runs
directory: one machine, or several mounting it over a file system with working ``flock``. A run
on a PostgreSQL store, which runners on several machines share, is locked in the database
instead (:class:`~agentmeter.store.runlock.DbRunLock`); :func:`run_lock` picks by the store.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from agentmeter.store.db import Store
from agentmeter.store.runlock import DbRunLock, locked_message
from agentmeter.store.runlock import RunLockedError as RunLockedError  # re-exported

LOCK_NAME = "run.lock"


def run_lock(store: Store, run_id: str) -> AbstractContextManager[Any]:
    """The run's lock for this store: in the database on PostgreSQL (runners on any machine),
    else the file lock in the run's directory."""
    if store.engine.dialect.name == "postgresql":
        return DbRunLock(store, run_id)
    return RunLock(store.run_dir(run_id), run_id)


class RunLock:
    """``with RunLock(run_dir, run_id):`` holds the run; entering raises RunLockedError if
    another process holds it."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.path = run_dir / LOCK_NAME
        self.run_id = run_id
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a run directory someone else can write (a shared runs directory) with
        # run.lock -> /etc/passwd had that file truncated by the runner (root)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise RunLockedError(locked_message(self.run_id, holder)) from None
        except BaseException:
            os.close(fd)
            raise
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "since": datetime.now(UTC).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor releases the flock


def _describe(fd: int) -> str:
    try:
        owner = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {owner['pid']} on {owner['host']} since {owner['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "by another process"

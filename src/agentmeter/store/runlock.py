"""The run lock on a shared (PostgreSQL) store: one live runner per run across machines.

The runner takes ``pg_try_advisory_lock(<64-bit hash of the run id>)`` on a connection of its
own, held (idle, autocommit) for the whole run. The server releases the lock when that session
ends in any way: the runner exits, is SIGKILLed, or its machine or network goes away (the
server notices a dead connection by TCP keepalives the session asks for: about 30 s); so,
like the file lock (``runner/lock.py``), nothing has to judge staleness. A ``run_locks`` row
says who holds it (pid, host, since), for the refusal message; a row left by a killed holder is
overwritten by the next one and never consulted except to name the live holder.
"""

from __future__ import annotations

import hashlib
import os
import socket
from types import TracebackType
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from agentmeter.records import utcnow
from agentmeter.store import schema as s

if TYPE_CHECKING:
    from agentmeter.store.db import Store


#: keepalive probes of the lock's session: a dead holder's lock is freed after about
#: idle + interval x count seconds
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 15, 5, 3


class RunLockedError(Exception):
    """The run is being run by another live process."""


def locked_message(run_id: str, holder: str) -> str:
    """The one-line refusal, the same for every kind of run lock."""
    return (f"run {run_id!r} is already running ({holder}); wait for it to finish or stop that "
            "process, then resume")


def lock_key(run_id: str) -> int:
    """The advisory lock's key: a signed 64-bit hash of the run id."""
    digest = hashlib.sha256(b"agentmeter-run:" + run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class DbRunLock:
    """``with DbRunLock(store, run_id):`` holds the run on a PostgreSQL store; entering raises
    RunLockedError naming the holder if another session holds it."""

    def __init__(self, store: Store, run_id: str) -> None:
        if store.engine.dialect.name != "postgresql":
            raise ValueError(f"DbRunLock needs a PostgreSQL store, not {store.engine.dialect.name}")
        self.store = store
        self.run_id = run_id
        self.key = lock_key(run_id)
        self._conn: sa.Connection | None = None

    def __enter__(self) -> DbRunLock:
        conn = self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            for setting, value in self._session_settings().items():
                conn.execute(sa.select(sa.func.set_config(setting, value, False)))
            got = conn.execute(sa.select(sa.func.pg_try_advisory_lock(self.key))).scalar_one()
            if not got:
                raise RunLockedError(locked_message(self.run_id, self._holder(conn)))
            row = {"run_id": self.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                   "since": utcnow()}
            ins = postgresql.insert(s.run_locks).values(row)
            conn.execute(ins.on_conflict_do_update(
                index_elements=["run_id"], set_={k: ins.excluded[k] for k in row if k != "run_id"}))
        except BaseException:
            conn.invalidate()  # ends the session: a lock it may hold goes with it
            conn.close()
            raise
        self._conn = conn
        return self

    def _session_settings(self) -> dict[str, str]:
        """The lock's session: named for whoever lists the server's sessions, and probed by
        the server with TCP keepalives, so a holder whose machine died or was cut off loses
        the lock in about half a minute rather than the system's two hours (a killed process
        loses it at once; Unix-socket sessions ignore these)."""
        return {"application_name": f"agentmeter run {self.run_id} (pid {os.getpid()})"[:63],
                "tcp_keepalives_idle": str(KEEPALIVE_IDLE_S),
                "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL_S),
                "tcp_keepalives_count": str(KEEPALIVE_COUNT)}

    def _holder(self, conn: sa.Connection) -> str:
        row = conn.execute(sa.select(s.run_locks).where(
            s.run_locks.c.run_id == self.run_id)).mappings().first()
        if row is None:
            return "by another process"
        since = row["since"].isoformat(timespec="seconds")
        return f"pid {row['pid']} on {row['host']} since {since}"

    @property
    def held(self) -> bool:
        """Whether the lock's session is still alive (a lost connection loses the lock)."""
        if self._conn is None:
            return False
        try:
            self._conn.execute(sa.select(1))
        except sa.exc.DBAPIError:
            return False
        return True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        try:
            conn.execute(sa.delete(s.run_locks).where(s.run_locks.c.run_id == self.run_id,
                                                      s.run_locks.c.pid == os.getpid(),
                                                      s.run_locks.c.host == socket.gethostname()))
        except sa.exc.DBAPIError:
            pass  # the session is gone already, and its lock with it
        finally:
            conn.invalidate()  # closes the session: the server drops the advisory lock
            conn.close()

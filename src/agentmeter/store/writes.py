"""The write plumbing of the results store (``Store``, db.py): one transaction a write
(``BEGIN IMMEDIATE`` on SQLite), upserts built once per shape, and model calls as they complete
written straight on the SQLite driver (one kept connection)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from agentmeter.store import schema as s
from agentmeter.store.engine import BUSY_TIMEOUT_MS, StoreError

#: upsert statements by (table, dialect, columns written): immutable, so shared by every store
_UPSERTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


class StoreWrites:
    """How ``Store`` writes: its transactions and upserts."""

    _engine: sa.Engine
    where: str
    # the connection ``_sqlite_upsert`` keeps (model calls as they complete), and its pid
    _driver_lock: threading.Lock
    _driver_raw: Any
    _driver_pid: int

    @contextmanager
    def _write(self, what: str) -> Iterator[sa.Connection]:
        try:
            with self._engine.connect() as conn:
                conn = conn.execution_options(**{s.SQLITE_BEGIN_OPTION: "IMMEDIATE"})
                with conn.begin():
                    yield conn
        except sa.exc.IntegrityError as exc:
            raise StoreError(f"{what}: rejected by the database: {exc.orig}") from None

    def _upsert(self, conn: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]],
                ) -> None:
        if not rows:
            return
        dialect = conn.dialect.name
        columns = tuple(rows[0])
        stmt = _UPSERTS.get((table.name, dialect, columns))
        if stmt is None:  # built once per shape: building ``excluded`` costs ~2 ms a time
            stmt = self._upsert_statement(table, dialect, columns)
            _UPSERTS[(table.name, dialect, columns)] = stmt
        conn.execute(stmt, list(rows))

    def _upsert_statement(self, table: sa.Table, dialect: str, columns: tuple[str, ...]) -> Any:
        keys = [c.name for c in table.primary_key.columns]
        if dialect == "sqlite":
            stmt: Any = sqlite.insert(table)
        elif dialect == "postgresql":
            stmt = postgresql.insert(table)
        else:  # pragma: no cover - no such backend configured yet
            raise StoreError(f"{self.where}: upsert not implemented for {dialect}")
        updates = {c: stmt.excluded[c] for c in columns if c not in keys}
        if updates:
            return stmt.on_conflict_do_update(index_elements=keys, set_=updates)
        return stmt.on_conflict_do_nothing(index_elements=keys)

    def _sqlite_upsert(self, table: sa.Table, rows: Sequence[dict[str, Any]], what: str,
                       wait: bool = True) -> bool:
        """``_upsert`` in one ``BEGIN IMMEDIATE`` transaction straight on the driver: the same
        SQL (compiled once from the same statement) and the same value conversions (each
        column type's bind processor), without the per-execution cost of the SQL layer, which
        was most of the time of storing one model call as it completes. ``wait=False``: if
        another connection holds the write lock, nothing is written and False returned at once
        (no busy wait: the gateway's commit on its event loop, ``gateway.persist``)."""
        sql, plan = self._sqlite_plan(table, tuple(rows[0]))
        params = [[row[k] if p is None else p(row[k]) for k, p in plan] for row in rows]
        if not self._driver_lock.acquire(blocking=wait):  # another thread is writing
            return False
        try:  # one connection kept for these writes (no pool round trip)
            raw = self._driver_raw
            if raw is None or self._driver_pid != os.getpid():  # none yet, or a forked copy's
                raw = self._driver_raw = self._engine.raw_connection()
                self._driver_pid = os.getpid()
            db = raw.driver_connection
            assert db is not None
            try:
                if wait:
                    db.execute("BEGIN IMMEDIATE")
                elif not _begin_now(db):
                    return False
            except BaseException:
                self._drop_driver_connection()
                raise
            try:
                db.executemany(sql, params)
            except BaseException as exc:
                try:
                    db.execute("ROLLBACK")
                except BaseException:
                    self._drop_driver_connection()
                if isinstance(exc, self._engine.dialect.loaded_dbapi.IntegrityError):
                    raise StoreError(f"{what}: rejected by the database: {exc}") from None
                raise
            try:
                db.execute("COMMIT")
            except BaseException:
                self._drop_driver_connection()
                raise
        finally:
            self._driver_lock.release()
        return True

    def _drop_driver_connection(self) -> None:
        raw, self._driver_raw = self._driver_raw, None
        if raw is not None:
            with contextlib.suppress(Exception):
                raw.invalidate()

    def _sqlite_plan(self, table: sa.Table, columns: tuple[str, ...]
                     ) -> tuple[str, list[tuple[str, Any]]]:
        """The upsert's SQL and its parameters in order: (column, bind processor or None)."""
        key = (table.name, "sqlite-driver", columns)
        plan = _UPSERTS.get(key)
        if plan is None:
            dialect = self._engine.dialect
            compiled = self._upsert_statement(table, "sqlite", columns).compile(dialect=dialect)
            plan = _UPSERTS[key] = (compiled.string, [
                (k, table.c[k].type.dialect_impl(dialect).bind_processor(dialect))
                for k in compiled.positiontup or ()])
        return plan


def _begin_now(db: Any) -> bool:
    """``BEGIN IMMEDIATE`` on a driver connection without waiting for the write lock: False if
    another connection holds it (the connection's busy timeout is restored either way)."""
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if "locked" not in str(e):  # SQLITE_BUSY: "database is locked"
            raise
        return False
    finally:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return True

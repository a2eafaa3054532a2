"""Opening a store's database: locations (runs dir, file, URL), SQLite settings, migration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agentmeter.store import schema as s
from agentmeter.store.artifacts import DB_FILENAME
from agentmeter.store.migrations import SchemaError, migrate

DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")
BUSY_TIMEOUT_MS = 30_000
#: how long opening a store waits for its database server before saying it cannot connect
CONNECT_TIMEOUT_S = 10


class StoreError(Exception):
    """A store operation failed; the message names the database or the record."""


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # transactions are begun explicitly (_sqlite_on_begin)
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_on_begin(conn: sa.Connection) -> None:
    mode = conn.get_execution_options().get(s.SQLITE_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _prepare_sqlite_file(db_path: Path) -> None:
    if db_path.is_dir():
        raise StoreError(f"{db_path}: is a directory, expected a database file")
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{db_path}: cannot create the directory {db_path.parent}: "
                         f"{exc.strerror or exc}") from None


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


def describe_location(location: str | Path) -> str:
    """``location`` for messages: a URL with its password hidden."""
    text = str(location)
    if "://" in text:
        try:
            return sa.make_url(text).render_as_string(hide_password=True)
        except sa.exc.ArgumentError:
            return text
    return text


def open_engine(location: str | Path, runs_dir: Path | None) -> tuple[sa.Engine, Path | None]:
    """An engine on ``location`` (created and migrated as needed) and the artifacts directory.

    ``location`` is a runs directory (database ``<dir>/agentmeter.db``, artifacts under
    ``<dir>/runs/``), a database file ending in .db/.sqlite/.sqlite3 (artifacts next to it),
    or an SQLAlchemy URL (pass ``runs_dir`` for artifacts).

    Pre-flight, before anything is written: a server that cannot be reached (in
    ``CONNECT_TIMEOUT_S`` unless the URL sets ``connect_timeout``), a missing driver, a database
    that is not an agentmeter store or is of a newer version are each one line naming the
    location (its password hidden).
    """
    text = describe_location(location)
    connect_args: dict[str, Any] = {}
    if "://" in str(location):
        try:
            url = sa.make_url(str(location))
        except sa.exc.ArgumentError as exc:
            raise StoreError(f"{text}: not a database URL: {exc}") from None
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            db_path = Path(url.database or "")
            _prepare_sqlite_file(db_path)
            runs_dir = runs_dir or db_path.parent
        if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    else:
        path = Path(location).expanduser()
        if path.suffix in DB_SUFFIXES:
            db_path, runs_dir = path, runs_dir or path.parent
        else:
            if path.exists() and not path.is_dir():
                raise StoreError(f"{path}: not a directory (expected a runs directory or a "
                                 f"database file ending in {', '.join(DB_SUFFIXES)})")
            db_path, runs_dir = path / DB_FILENAME, runs_dir or path
        _prepare_sqlite_file(db_path)
        url = sa.URL.create("sqlite", database=str(db_path))
    try:
        engine = sa.create_engine(url, connect_args=connect_args)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise StoreError(f"{text}: cannot open: {_one_line(exc)}") from None
    except ImportError as exc:  # the URL's driver is not installed
        raise StoreError(f"{text}: cannot open: its database driver is not installed "
                         f"({_one_line(exc)})") from None
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_on_connect)
        sa.event.listen(engine, "begin", _sqlite_on_begin)
    else:
        try:
            engine.connect().close()
        except sa.exc.DBAPIError as exc:
            engine.dispose()
            raise StoreError(f"{text}: cannot connect to the database: "
                             f"{_one_line(exc.orig)}") from None
    try:
        migrate(engine)
    except SchemaError as exc:
        engine.dispose()
        raise StoreError(f"{text}: {exc}") from None
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise StoreError(f"{text}: not a usable database: {_one_line(exc.orig)}") from None
    return engine, runs_dir

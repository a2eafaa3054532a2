"""A real PostgreSQL server for store tests, started by the test setup and stopped after.

The server runs as the unprivileged ``nobody`` user (PostgreSQL refuses to run as root) from a
fresh cluster in a temporary directory, listening only on a Unix socket there. When no
PostgreSQL is installed and we are root, it is installed with apt first, as a fresh Debian
machine would need.

Use: ``from pg_fixtures import postgres_url_fixture`` in a test module (or conftest); add
``pg_url_fixture`` for a fresh database per test on that server.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from proclife import end

from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.spec import SandboxError


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versions[-1] if versions else None


def _ensure_installed() -> tuple[str, str]:
    # the project's installer (one install across parallel test sessions and trials)
    with contextlib.suppress(SandboxError):
        ensure_tools({"initdb": "postgresql", "postgres": "postgresql"}, "the PostgreSQL tests",
                     find=_bin)
    initdb, postgres = _bin("initdb"), _bin("postgres")
    if initdb is None or postgres is None:
        pytest.fail("PostgreSQL is not installed and cannot be installed (needs root and apt)")
    return initdb, postgres


@pytest.fixture(scope="session", name="postgres_url")
def postgres_url_fixture() -> Iterator[str]:
    """``postgresql+psycopg://`` URL of a fresh database on a server this fixture owns."""
    if os.geteuid() != 0:
        pytest.skip("the PostgreSQL test server is started as root dropping to 'nobody'")
    with postgres_server() as url:
        yield url


@pytest.fixture(name="pg_url")
def pg_url_fixture(postgres_url: str) -> Iterator[str]:
    """A fresh database on the session's server for one test."""
    name = "t_" + secrets.token_hex(6)
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    yield sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
    admin.dispose()


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL server (as ``nobody``) for as long as the block runs; its URL.
    Outside pytest too (benchmarks/ray.py)."""
    initdb, postgres = _ensure_installed()
    root = Path(tempfile.mkdtemp(prefix="agentmeter-pg-", dir="/tmp"))
    os.chmod(root, 0o755)
    data = root / "data"
    data.mkdir()
    shutil.chown(data, "nobody", "nogroup")
    drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    r = subprocess.run([*drop, initdb, "-D", str(data), "-U", "agentmeter", "--auth=trust",
                        "--encoding=UTF8", "--no-sync"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    log = (root / "postgres.log").open("w")
    server = subprocess.Popen([*drop, postgres, "-D", str(data), "-k", str(data), "-c",
                               "listen_addresses=", "-c", "fsync=off", "-p", "5432"],
                              stdout=log, stderr=subprocess.STDOUT)
    url = f"postgresql+psycopg://agentmeter@/postgres?host={data}&port=5432"
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(host=str(data), port=5432, user="agentmeter", dbname="postgres").close()
                break
            except psycopg.OperationalError:
                assert server.poll() is None, (root / "postgres.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "PostgreSQL did not come up in 60 s"
                time.sleep(0.1)
        yield url
    finally:
        end(server)
        log.close()
        shutil.rmtree(root, ignore_errors=True)

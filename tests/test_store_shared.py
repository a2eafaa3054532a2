"""A store that runners on several machines share (a real PostgreSQL server): the run lock held
in the database refuses a second runner whatever its runs directory and is freed when its
holder is SIGKILLed; an unreachable server and a store of another schema version are one line
before anything is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.records import RunRecord
from agentmeter.runner.lock import RunLockedError, run_lock
from agentmeter.runner.session import RunRequest
from agentmeter.store import schema
from agentmeter.store.db import Store, StoreError
from agentmeter.store.runlock import DbRunLock


def _holder(url: str, runs_dir: Path) -> subprocess.Popen[str]:
    """Another process (another machine, for all the lock can tell: its own runs directory)
    holding run 'r' until killed."""
    code = ("import time; from pathlib import Path\n"
            "from agentmeter.runner.lock import run_lock\n"
            "from agentmeter.store.db import Store\n"
            f"st = Store.open({url!r}, runs_dir=Path({str(runs_dir)!r}))\n"
            "with run_lock(st, 'r'):\n"
            "    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_db_run_lock_spans_runs_directories_and_dies_with_its_holder(pg_url: str,
                                                                     tmp_path: Path) -> None:
    holder = _holder(pg_url, tmp_path / "machine-a")
    try:
        with Store.open(pg_url, runs_dir=tmp_path / "machine-b") as st:
            lock = run_lock(st, "r")
            assert isinstance(lock, DbRunLock)
            with pytest.raises(RunLockedError) as refused:
                lock.__enter__()
            assert str(refused.value).startswith(
                f"run 'r' is already running (pid {holder.pid} on ")
            assert "\n" not in str(refused.value)
            with run_lock(st, "other"):  # another run is not blocked
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # no staleness rule: the server ended the dead holder's session and its lock
    with Store.open(pg_url, runs_dir=tmp_path / "machine-b") as st:
        with run_lock(st, "r") as held:
            assert held.held
            with st.engine.connect() as conn:  # the session is named for the server's listing
                names = conn.execute(sa.text(
                    "SELECT application_name FROM pg_stat_activity")).scalars().all()
            assert f"agentmeter run r (pid {os.getpid()})" in names
            again = DbRunLock(st, "r")
            with pytest.raises(RunLockedError, match=f"pid {os.getpid()} on "):
                again.__enter__()
        with run_lock(st, "r"):  # released on exit: taken again
            pass


def test_cli_refuses_a_second_runner_on_another_machine(pg_url: str, tmp_path: Path) -> None:
    """`agentmeter resume r` with the store URL but its own runs directory (as on another
    machine) is refused while a runner holds run r."""
    request = RunRequest(suites=["starter"], task_ids=["log-level-counts"])
    with Store.open(pg_url, runs_dir=tmp_path / "machine-a") as st:
        st.create_run(RunRecord(id="r", settings={"request": request.model_dump()}))
    holder = _holder(pg_url, tmp_path / "machine-a")
    try:
        r = _cli_here(pg_url, "resume", "r", "--store", str(tmp_path / "machine-b"))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"run 'r' is already running (pid {holder.pid} on" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr
    with Store.open(pg_url) as st:  # nothing was run or written by the refused runner
        assert st.trials("r") == []
        assert st.require_run("r").status == "running"


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli_here(url: str, *args: str) -> Ran:
    """The CLI with the store's URL, in this process (typer's runner: a refusal is decided
    before any work, and a Python start per call took seconds on a loaded machine); an
    exception escaping the CLI is put in stderr as a traceback would be."""
    res = CliRunner().invoke(app, list(args), env={"AGENTMETER_DATABASE_URL": url})
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "Traceback (escaped the CLI): " + repr(res.exception)
    return Ran(res.exit_code, res.stdout, err)


def _cli_runs(url: str, store_dir: Path) -> Ran:
    return _cli_here(url, "runs", "--store", str(store_dir))


def test_unreachable_store_is_one_line(tmp_path: Path) -> None:
    url = "postgresql+psycopg://agentmeter:s3cret@127.0.0.1:1/agentmeter"
    with pytest.raises(StoreError) as e:
        Store.open(url, runs_dir=tmp_path / "runs")
    message = str(e.value)
    assert message.startswith("postgresql+psycopg://agentmeter:***@127.0.0.1:1/agentmeter: "
                              "cannot connect to the database: ")
    assert "\n" not in message and "s3cret" not in message
    r = _cli_runs(url, tmp_path / "runs")
    assert r.returncode == 2
    assert "cannot connect to the database" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr and "s3cret" not in r.stderr
    assert not (tmp_path / "runs").exists()
    # a driver that is not installed is one line too
    with pytest.raises(StoreError, match="database driver is not installed"):
        Store.open("postgresql+psycopg2://u@h/d")  # agentmeter uses psycopg (3)


def _tables(url: str) -> dict[str, list[sa.Row[Any]]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        found = {n: list(conn.execute(sa.text(f"SELECT * FROM {n}")).all()) for n in names}
    engine.dispose()
    return found


@pytest.mark.parametrize(("damage", "message"), [
    ("UPDATE schema_version SET version = 99",
     "schema version 99 is newer than this agentmeter supports (4); upgrade agentmeter"),
    ("DELETE FROM schema_version", "unknown schema version [] in its schema_version table"),
    ("DROP TABLE model_calls", "schema version 4 but its tables ['model_calls'] are missing"),
])
def test_store_of_another_schema_is_refused_untouched(pg_url: str, tmp_path: Path, damage: str,
                                                      message: str) -> None:
    Store.open(pg_url, runs_dir=tmp_path).close()
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text(damage))
    engine.dispose()
    before = _tables(pg_url)
    with pytest.raises(StoreError) as e:
        Store.open(pg_url, runs_dir=tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value)
    r = _cli_runs(pg_url, tmp_path)
    assert r.returncode == 2 and message in " ".join(r.stderr.split())
    assert _tables(pg_url) == before  # nothing written


def test_many_processes_open_and_migrate_a_new_store_at_once(pg_url: str) -> None:
    """Workers starting together on an empty shared database: one migrates, none fails."""
    code = (f"from agentmeter.store.db import Store; Store.open({pg_url!r}).close(); "
            "print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1500:] for _, err in results]
    with Store.open(pg_url) as st:
        assert st.schema_version() == schema.SCHEMA_VERSION

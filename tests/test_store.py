"""The results store against real SQLite files: round trips, WAL, concurrency, SIGKILL
durability, migrations, bad locations."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from agentmeter.records import (
    AgentSpec,
    ArtifactRecord,
    ConfigRecord,
    ModelCallRecord,
    ModelSpec,
    PhaseTimings,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.store import schema
from agentmeter.store.db import Store, StoreError
from agentmeter.store.migrations import migrate

T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
CONFIG = ConfigRecord(
    id="cfg1", label="scripted/solver x native",
    model=ModelSpec(name="scripted/solver", wire_api="chat", price_key="openai/gpt-4o"),
    agent=AgentSpec(name="native", version="0.1", options={"max_turns": 5, "x": [1, "a"]}),
)


def make_store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / "runs")
    store.create_run(RunRecord(id="run1", created_at=T0))
    store.upsert_config(CONFIG, run_id="run1")
    return store


def full_trial(n: int = 0, try_number: int = 0,
               status: TrialStatus = TrialStatus.PASSED) -> TrialRecord:
    return TrialRecord(
        id=f"cfg1:task-{n}:0", run_id="run1", config_id="cfg1", task_id=f"task-{n}", attempt=0,
        try_number=try_number, status=status, reward=0.75, rewards={"a": 1.0, "b": 0.5},
        passed=True, error=None,
        usage=TokenUsage(input=1000, output=200, cache_creation=None, cache_read=300,
                         reasoning=0),
        cost_usd=0.0123, model_calls=3, tool_calls={"bash": 2, "write_file": 1}, turns=4,
        started_at=T0, finished_at=T0 + timedelta(seconds=12.5),
        timings=PhaseTimings(environment=0.2, agent_run=10.0, verification=1.5),
        owner_pid=4242, extra={"note": "hi", "nested": {"k": [1, 2]}},
    )


def call(seq: int, trial_id: str = "cfg1:task-0:0") -> ModelCallRecord:
    return ModelCallRecord(
        trial_id=trial_id, seq=seq, wire_api="responses", client_api="chat", model="m",
        upstream_model="m-2025", status_code=200, stream=True, started_at=T0,
        latency_s=0.5, ttft_s=0.1, usage=TokenUsage(input=10 + seq, output=5, cache_read=2),
        cost_usd=0.001, bytes_in=100, bytes_out=200, error=None, scripted=True,
    )


# --- round trips ---------------------------------------------------------------------------


def test_round_trip_every_record(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    run = store.get_run("run1")
    assert run == RunRecord(id="run1", created_at=T0)
    assert run is not None and run.created_at.tzinfo is not None

    assert store.get_config("cfg1") == CONFIG
    assert store.run_configs("run1") == [CONFIG]

    task = TaskRecord(id="task-0", suite="starter", digest="sha256:abc", tier="easy",
                      category="files", source="agentmeter", tags=["a", "b"], path="/x/task-0")
    store.upsert_task(task, run_id="run1")
    assert store.get_task("task-0", "sha256:abc") == task
    assert store.run_tasks("run1") == [task]

    trial = full_trial()
    store.save_trial(trial)
    assert store.get_trial("run1", trial.id) == trial
    assert store.trials("run1") == [trial]

    calls = [call(0), call(1)]
    store.add_model_calls("run1", calls)
    assert store.model_calls("run1", trial.id) == calls

    art = ArtifactRecord(trial_id=trial.id, name="agent.log", kind="agent_log",
                         relpath="trials/x/agent.log", size=12)
    store.add_artifact("run1", art)
    assert store.artifacts("run1", trial.id) == [art]
    store.close()

    reopened = Store.open(tmp_path / "runs")  # everything survives a reopen
    assert reopened.get_trial("run1", trial.id) == trial
    assert reopened.model_calls("run1") == calls


def test_usage_is_queryable_in_sql(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.save_trial(full_trial(0))
    store.save_trial(full_trial(1))
    with store.engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.sum(schema.trials.c.cache_read_tokens))).scalar()
        nulls = conn.execute(sa.select(sa.func.count()).where(
            schema.trials.c.cache_creation_tokens.is_(None))).scalar()
    assert total == 600 and nulls == 2  # None stays NULL, never 0


def test_runs_listing_and_status(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.create_run(RunRecord(id="run2", created_at=T0 + timedelta(hours=1)))
    assert [r.id for r in store.list_runs()] == ["run2", "run1"]
    assert [r.id for r in store.list_runs(limit=1)] == ["run2"]
    done = store.update_run_status("run1", "finished")
    assert done.status == "finished" and done.finished_at is not None
    with pytest.raises(StoreError, match="already exists"):
        store.create_run(RunRecord(id="run1"))
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.update_run_status("nope", "finished")
    with pytest.raises(StoreError, match="run id"):
        store.create_run(RunRecord(id="../escape"))


def test_save_trial_upserts_and_keeps_tries(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    running = full_trial(status=TrialStatus.RUNNING).model_copy(update={"reward": None})
    store.save_trial(running)
    store.save_trial(full_trial(status=TrialStatus.INFRA_INVALID))  # same key: replaced
    assert len(store.trials("run1")) == 1
    store.save_trial(full_trial(try_number=1, status=TrialStatus.FAILED))
    store.save_trial(full_trial(try_number=2, status=TrialStatus.RUNNING))
    store.save_trial(full_trial(n=1, status=TrialStatus.PASSED))
    assert [t.try_number for t in store.trials("run1") if t.task_id == "task-0"] == [0, 1, 2]
    assert store.get_trial("run1", "cfg1:task-0:0").try_number == 2  # type: ignore[union-attr]
    assert store.get_trial("run1", "cfg1:task-0:0", 0).status == "infra_invalid"  # type: ignore[union-attr]
    latest = store.latest_completed_trials("run1")
    assert [(t.task_id, t.try_number, t.status) for t in latest] == [
        ("task-0", 1, TrialStatus.FAILED), ("task-1", 0, TrialStatus.PASSED)]
    assert [t.status for t in store.trials("run1", TrialStatus.RUNNING)] == ["running"]


def test_trial_needs_known_run_and_config(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(StoreError, match="rejected by the database"):
        store.save_trial(full_trial().model_copy(update={"run_id": "ghost"}))
    with pytest.raises(StoreError, match="rejected by the database"):
        store.save_trial(full_trial().model_copy(update={"config_id": "ghost"}))
    assert store.trials("run1") == []


def test_run_is_pinned_to_task_versions(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    v1 = TaskRecord(id="t", digest="sha256:1")
    store.upsert_task(v1, run_id="run1")
    store.upsert_task(v1.model_copy(update={"tier": "hard"}), run_id="run1")  # same version
    assert store.run_tasks("run1")[0].tier == "hard"
    with pytest.raises(StoreError, match="has changed since"):
        store.upsert_task(TaskRecord(id="t", digest="sha256:2"), run_id="run1")
    store.upsert_task(TaskRecord(id="t", digest="sha256:2"))  # versions coexist
    assert store.get_task("t", "sha256:1") is not None
    assert [t.digest for t in store.run_tasks("run1")] == ["sha256:1"]


def test_model_calls_are_idempotent_and_per_try(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.add_model_calls("run1", [call(0), call(1)])
    store.add_model_calls("run1", [call(1)])
    store.add_model_calls("run1", [call(0)], try_number=1)
    assert len(store.model_calls("run1", "cfg1:task-0:0", try_number=0)) == 2
    assert len(store.model_calls("run1", "cfg1:task-0:0")) == 3
    store.add_model_calls("run1", [])


def test_resume_helpers(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.save_trial(full_trial(0, status=TrialStatus.PASSED))
    store.save_trial(full_trial(1, status=TrialStatus.RUNNING))
    store.save_trial(full_trial(2, status=TrialStatus.PENDING))
    store.add_model_calls("run1", [call(0, "cfg1:task-1:0")])
    assert {t.task_id for t in store.incomplete_trials("run1")} == {"task-1", "task-2"}

    closed = store.close_incomplete_trials("run1", error="runner died")
    assert {(t.task_id, t.status, t.error) for t in closed} == {
        ("task-1", "infra_invalid", "runner died"), ("task-2", "infra_invalid", "runner died")}
    assert store.incomplete_trials("run1") == []
    assert len(store.model_calls("run1", "cfg1:task-1:0")) == 1  # spending kept

    store.save_trial(full_trial(3, status=TrialStatus.RUNNING))
    store.add_model_calls("run1", [call(0, "cfg1:task-3:0")])
    assert store.delete_incomplete_trials("run1") == 1
    assert store.get_trial("run1", "cfg1:task-3:0") is None
    assert store.model_calls("run1", "cfg1:task-3:0") == []
    assert len(store.trials("run1")) == 3


def test_artifact_layout(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    d = store.artifact_dir("run1", "cfg1:task-0:0")
    assert d.is_dir()
    assert d.parent == (tmp_path / "runs" / "runs" / "run1" / "trials").resolve()
    assert ":" not in d.name and d.name.startswith("cfg1_task-0_0-")
    assert store.artifact_dir("run1", "cfg1:task-0:0", try_number=1) != d
    assert store.artifact_dir("run1", "cfg1_task-0_0") != d  # no collisions
    assert d.is_relative_to(store.run_dir("run1"))


# --- SQLite behaviour ----------------------------------------------------------------------


def test_wal_and_foreign_keys_on(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    raw = sqlite3.connect(tmp_path / "runs" / "agentmeter.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent
    raw.close()


WRITER = textwrap.dedent("""
    import sys
    from agentmeter.store.db import Store
    from agentmeter.records import TrialRecord, TrialStatus
    store = Store.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        store.save_trial(TrialRecord(id=f"cfg1:t{i}:0", run_id="run1", config_id="cfg1",
                                     task_id=f"t{i}", attempt=0, status=TrialStatus.PASSED,
                                     extra={"pad": "x" * 2000}))
        print(f"cfg1:t{i}:0", flush=True)
""")


def test_concurrent_reader_while_writing(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "runs"), "150"],
                              stdout=subprocess.PIPE, text=True)
    thread_counts: list[int] = []

    def thread_writer() -> None:  # a second writer in this process, through the same Store
        for i in range(50):
            store.save_trial(full_trial(100 + i))
            thread_counts.append(i)

    thread = threading.Thread(target=thread_writer)
    thread.start()
    seen: list[int] = []
    while writer.poll() is None or thread.is_alive():
        seen.append(len(store.trials("run1")))
    thread.join()
    assert writer.wait() == 0
    assert seen == sorted(seen)  # readers see a growing, consistent set
    assert len(store.trials("run1")) == 200 and len(thread_counts) == 50


def test_sigkill_leaves_every_returned_trial(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.close()
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "runs"), "100000"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    reported: list[str] = []
    for line in child.stdout:
        reported.append(line.strip())
        if len(reported) == 200:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    reported.extend(line.strip() for line in child.stdout)  # lines already in the pipe
    reopened = Store.open(tmp_path / "runs")
    with reopened.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    stored = {t.id for t in reopened.trials("run1")}
    assert set(reported) <= stored
    assert len(stored) - len(reported) <= 1  # at most the one in flight when killed


# --- migrations ----------------------------------------------------------------------------


def _columns(engine: sa.Engine) -> dict[str, set[str]]:
    inspector = sa.inspect(engine)
    return {t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()}


def test_migrations_build_the_current_schema(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "a.db")
    assert store.schema_version() == schema.SCHEMA_VERSION
    expected = {t.name: {c.name for c in t.columns} for t in schema.metadata.sorted_tables}
    assert _columns(store.engine) == expected


def test_upgrade_from_v0_empty_file(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    sqlite3.connect(db).close()  # an empty SQLite database
    store = Store.open(db)
    assert store.schema_version() == schema.SCHEMA_VERSION
    store.create_run(RunRecord(id="r"))


def test_upgrade_from_v1_keeps_data(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    assert migrate(engine, target=1) == 1
    with engine.begin() as conn:  # data written by a v1 agentmeter
        conn.execute(sa.insert(schema.runs).values(schema.run_to_row(RunRecord(id="old"))))
        conn.execute(sa.insert(schema.configs).values(schema.config_to_row(CONFIG)))
        old = full_trial().model_copy(update={"run_id": "old"})
        row = schema.trial_to_row(old, T0)
        del row["lease_owner"], row["lease_expires_at"]  # v4 columns
        conn.execute(sa.insert(schema.trials).values(row))
    assert "model_calls" not in sa.inspect(engine).get_table_names()
    engine.dispose()

    store = Store.open(db)
    assert store.schema_version() == schema.SCHEMA_VERSION
    assert store.get_trial("old", old.id) == old
    store.add_model_calls("old", [call(0)])  # the v2 tables work
    assert len(store.model_calls("old")) == 1


def test_upgrade_from_v2_marks_existing_calls_as_the_agents(tmp_path: Path) -> None:
    db = tmp_path / "v2.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    assert migrate(engine, target=2) == 2
    with engine.begin() as conn:  # a call written by a v2 agentmeter (no purpose column)
        conn.execute(sa.insert(schema.runs).values(schema.run_to_row(RunRecord(id="old"))))
        row = schema.model_call_to_row("old", 0, call(0))
        del row["purpose"]
        conn.execute(sa.insert(schema.model_calls).values(row))
    engine.dispose()

    store = Store.open(db)
    assert store.schema_version() == schema.SCHEMA_VERSION
    assert [c.purpose for c in store.model_calls("old")] == ["agent"]
    store.add_model_calls("old", [call(1).model_copy(update={"purpose": "judge"})])
    assert [c.purpose for c in store.model_calls("old")] == ["agent", "judge"]


def test_upgrade_from_v3_leaves_tries_unleased(tmp_path: Path) -> None:
    db = tmp_path / "v3.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    assert migrate(engine, target=3) == 3
    with engine.begin() as conn:  # a running try written by a v3 agentmeter
        conn.execute(sa.insert(schema.runs).values(schema.run_to_row(RunRecord(id="old"))))
        conn.execute(sa.insert(schema.configs).values(schema.config_to_row(CONFIG)))
        old = full_trial(status=TrialStatus.RUNNING).model_copy(update={"run_id": "old"})
        row = schema.trial_to_row(old, T0)
        del row["lease_owner"], row["lease_expires_at"]
        conn.execute(sa.insert(schema.trials).values(row))
    engine.dispose()

    store = Store.open(db)
    assert store.schema_version() == schema.SCHEMA_VERSION == 4
    got = store.get_trial("old", old.id)
    assert got == old and got.lease_owner is None and got.lease_expires_at is None
    assert store.close_expired_trials("old", "x") == []  # no lease: today's rule only
    assert [t.id for t in store.close_incomplete_trials("old")] == [old.id]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    Store.open(db).close()
    raw = sqlite3.connect(db)
    raw.execute("UPDATE schema_version SET version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        Store.open(db)


# --- bad locations -------------------------------------------------------------------------


def test_malformed_locations(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match=r"file/sub/agentmeter.db: cannot create the directory"):
        Store.open(blocker / "sub")
    with pytest.raises(StoreError, match="not a directory"):
        Store.open(blocker)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"garbage.db: not a usable database: file is not a"):
        Store.open(garbage)
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path / "dir.db")
    foreign = tmp_path / "foreign.sqlite"
    raw = sqlite3.connect(foreign)
    raw.execute("CREATE TABLE people (name TEXT)")
    raw.close()
    with pytest.raises(StoreError, match=r"not an agentmeter database .*people"):
        Store.open(foreign)
    with pytest.raises(StoreError, match="cannot open"):
        Store.open("nosuchdriver://user@host/db")


def test_url_and_missing_runs_dir(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'u.db'}")
    assert store.runs_dir == tmp_path.resolve()
    memory = Store.open("sqlite://")
    with pytest.raises(StoreError, match="no runs directory"):
        memory.artifact_dir("r", "t")

"""The results store: one database (SQLite by default, any SQLAlchemy URL later) plus an
artifacts tree, written through SQLAlchemy Core.

SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction survives the
process being killed (not a power cut). Every write is one transaction begun with
``BEGIN IMMEDIATE`` so concurrent writers queue on the busy timeout; readers never block
writers. Methods are synchronous and short; the runner may call them from its event loop.

Trials are keyed by (run id, trial id, try number): trial ids ('{config}:{task}:{attempt}')
repeat across runs, and every try of a retried trial is kept. Model calls and artifacts carry
the same key, so spending of abandoned tries stays accountable.

:class:`Store` is every write; every read is :mod:`agentmeter.store.queries` (the one read API:
the Store's read methods are shorthands for its single-record reads), the viewer's and the
report's paged reads :mod:`agentmeter.store.browse`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from agentmeter.records import (
    ArtifactRecord,
    ConfigRecord,
    ModelCallRecord,
    RunRecord,
    TaskRecord,
    TrialRecord,
    TrialStatus,
    utcnow,
)
from agentmeter.store import leases, queries
from agentmeter.store import schema as s
from agentmeter.store.artifacts import RUN_ID_PATTERN, run_dir, trial_dir
from agentmeter.store.engine import StoreError as StoreError  # re-exported: callers catch it here
from agentmeter.store.engine import describe_location, open_engine
from agentmeter.store.expressions import NOT_FINAL
from agentmeter.store.migrations import current_version
from agentmeter.store.writes import StoreWrites

RunStatus = Literal["running", "finished", "interrupted", "imported"]



class Store(StoreWrites):
    """Runs, configs, tasks, trials, model calls and artifacts of one results location (its
    transactions and upserts: ``StoreWrites``, writes.py)."""

    def __init__(self, engine: sa.Engine, runs_dir: Path | None, where: str) -> None:
        self._engine = engine
        self.runs_dir = runs_dir
        self.where = where
        # the connection ``_sqlite_upsert`` keeps (model calls as they complete), and its pid
        self._driver_lock = threading.Lock()
        self._driver_raw: Any = None
        self._driver_pid = 0

    # --- opening -------------------------------------------------------------------------

    @classmethod
    def open(cls, location: str | Path, *, runs_dir: Path | None = None) -> Store:
        """Open (creating and migrating as needed) a store.

        ``location`` is a runs directory (database ``<dir>/agentmeter.db``, artifacts under
        ``<dir>/runs/``), a database file ending in .db/.sqlite/.sqlite3 (artifacts next to it),
        or an SQLAlchemy URL (pass ``runs_dir`` for artifacts).
        """
        engine, runs_dir = open_engine(location, runs_dir)
        return cls(engine, runs_dir.resolve() if runs_dir else None,
                   describe_location(location))

    def close(self) -> None:
        with self._driver_lock:
            raw, self._driver_raw = self._driver_raw, None
            if raw is not None and self._driver_pid == os.getpid():
                raw.close()
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def engine(self) -> sa.Engine:
        """The database engine, for the store's own read modules (``queries``, ``browse``) and
        for tests and benchmarks that set up data in bulk; nothing else in the package builds
        SQL on the tables."""
        return self._engine

    def clock(self) -> datetime:
        """The database's clock (UTC), which leases are measured on: one clock for every
        machine that shares the store (SQLite: this machine's)."""
        with self._engine.connect() as conn:
            return leases.db_now(conn)

    def schema_version(self) -> int:
        with self._engine.connect() as conn:
            return current_version(conn)

    # --- runs ----------------------------------------------------------------------------

    def create_run(self, run: RunRecord) -> RunRecord:
        if not RUN_ID_PATTERN.match(run.id):
            raise StoreError(f"run id {run.id!r}: use letters, digits, '.', '_' and '-' "
                             "(it names a directory)")
        if self.get_run(run.id) is not None:
            raise StoreError(f"run {run.id!r} already exists in {self.where}")
        with self._write(f"run {run.id!r}") as conn:
            conn.execute(sa.insert(s.runs).values(**s.run_to_row(run)))
        return run

    # the read methods are shorthands for queries.py, the one read API

    def get_run(self, run_id: str) -> RunRecord | None:
        return queries.get_run(self, run_id)

    def require_run(self, run_id: str) -> RunRecord:
        """The run, or :class:`StoreError` naming it and this store."""
        run = self.get_run(run_id)
        if run is None:
            raise StoreError(f"no run {run_id!r} in {self.where}")
        return run

    def list_runs(self, limit: int | None = None) -> list[RunRecord]:
        """Newest first."""
        return queries.list_runs(self, limit)

    def update_run_status(self, run_id: str, status: RunStatus,
                          finished_at: datetime | None = None) -> RunRecord:
        if status in ("finished", "interrupted") and finished_at is None:
            finished_at = utcnow()
        with self._write(f"run {run_id!r}") as conn:
            result = conn.execute(sa.update(s.runs).where(s.runs.c.id == run_id)
                                  .values(status=status, finished_at=finished_at))
            if result.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.where}")
        run = self.get_run(run_id)
        assert run is not None
        return run

    # --- configs and tasks ---------------------------------------------------------------

    def upsert_config(self, config: ConfigRecord, run_id: str | None = None) -> None:
        """Insert or update a config; with ``run_id`` also record that the run uses it."""
        with self._write(f"config {config.id!r}") as conn:
            self._upsert(conn, s.configs, [s.config_to_row(config)])
            if run_id is not None:
                self._upsert(conn, s.run_configs, [{"run_id": run_id, "config_id": config.id}])

    def get_config(self, config_id: str) -> ConfigRecord | None:
        return queries.get_config(self, config_id)

    def run_configs(self, run_id: str) -> list[ConfigRecord]:
        """The run's configurations, in id order."""
        return list(queries.run_configs(self, [run_id]).values())

    def upsert_task(self, task: TaskRecord, run_id: str | None = None) -> None:
        """Insert or update a task version (keyed by id + digest); with ``run_id`` also pin the
        run to this version. A run never silently switches to another version of a task."""
        with self._write(f"task {task.id!r}") as conn:
            self._upsert(conn, s.tasks, [s.task_to_row(task)])
            if run_id is None:
                return
            pinned = conn.execute(
                sa.select(s.run_tasks.c.task_digest).where(
                    s.run_tasks.c.run_id == run_id, s.run_tasks.c.task_id == task.id)
            ).scalar()
            if pinned is not None and pinned != task.digest:
                raise StoreError(f"run {run_id!r} uses task {task.id!r} at {pinned}; the task "
                                 f"has changed since ({task.digest})")
            self._upsert(conn, s.run_tasks, [{"run_id": run_id, "task_id": task.id,
                                              "task_digest": task.digest}])

    def get_task(self, task_id: str, digest: str) -> TaskRecord | None:
        return queries.get_task(self, task_id, digest)

    def run_tasks(self, run_id: str) -> list[TaskRecord]:
        """The task versions a run is pinned to, in id order."""
        run = self.get_run(run_id)
        pinned = [] if run is None else queries.run_tasks(self, [run]).tasks.values()
        return sorted(pinned, key=lambda t: t.id)

    # --- trials --------------------------------------------------------------------------

    def save_trial(self, trial: TrialRecord, *, owner: str | None = None) -> bool:
        """Insert or replace one try of a trial, atomically; durable once this returns.

        With an ``owner`` (default: the record's ``lease_owner``) the write is fenced: refused,
        nothing written, when the store has the try closed by someone else or leased to another
        owner (:func:`agentmeter.store.leases.fenced_save`). Returns whether it was written
        (always True without an owner)."""
        owner = owner if owner is not None else trial.lease_owner
        with self._write(f"trial {trial.id!r} try {trial.try_number} of run {trial.run_id!r}"
                         ) as conn:
            if owner is not None:
                return leases.fenced_save(conn, trial, owner, utcnow())
            self._upsert(conn, s.trials, [s.trial_to_row(trial, utcnow())])
        return True

    def settle_books(self, run_id: str, trial_id: str, try_number: int
                     ) -> TrialRecord | None:
        """Total a try that ended with model calls under way (``extra['calls_in_flight']``) on
        its stored calls again: its totals once every started call is stored, else n/a with
        ``extra['usage_na_reason']`` (:func:`agentmeter.store.leases.settle_books`)."""
        with self._write(f"trial {trial_id!r} try {try_number} of run {run_id!r}") as conn:
            return leases.settle_books(conn, run_id, trial_id, try_number, utcnow())

    def renew_leases(self, run_id: str, trial_ids: list[str], owner: str, ttl_s: float, *,
                     now: datetime | None = None) -> list[str]:
        """Extend to ``ttl_s`` seconds from now (the database's clock, or ``now``) the leases of
        the run's tries ``trial_ids`` that are still pending/running and held by ``owner`` (an
        unowned one is claimed). Returns the ids it could NOT renew: closed by someone else or
        leased to another owner (the owner should stop working on them)."""
        with self._write(f"leases of run {run_id!r}") as conn:
            return leases.renew(conn, run_id, trial_ids, owner, ttl_s, now)

    def close_expired_trials(self, run_id: str, reason: str, now: datetime | None = None
                             ) -> list[TrialRecord]:
        """Close the run's pending/running tries whose lease lapsed (before ``now``, default
        the database's clock) as infra_invalid with error ``reason``, their stored spending
        totalled on them and their owner fenced out. Tries without a lease are left alone
        (``close_incomplete_trials`` is their rule). Returns the closed tries."""
        with self._write(f"expired leases of run {run_id!r}") as conn:
            return leases.close_expired(conn, run_id, reason, now)

    def close_trials(self, run_id: str, trial_ids: Collection[str], reason: str
                     ) -> list[TrialRecord]:
        """Close the pending/running tries of ``trial_ids`` now, leased or not (their worker is
        known dead), as ``close_expired_trials`` does. Returns the closed tries."""
        if not trial_ids:
            return []
        t = s.trials
        with self._write(f"trials of run {run_id!r}") as conn:
            return leases.close_where(conn, sa.and_(t.c.run_id == run_id,
                                                    t.c.id.in_(list(trial_ids))),
                                      reason, utcnow())

    def get_trial(self, run_id: str, trial_id: str, try_number: int | None = None
                  ) -> TrialRecord | None:
        """One try of a trial; the latest try when ``try_number`` is None."""
        return queries.get_trial(self, run_id, trial_id, try_number)

    def trials(self, run_id: str,
               status: TrialStatus | Collection[TrialStatus] | None = None) -> list[TrialRecord]:
        """Every try of every trial of a run (optionally of some statuses), in a stable order."""
        return queries.trials(self, run_id, status)

    def latest_completed_trials(self, run_id: str) -> list[TrialRecord]:
        """The run's selected tries: per (config, task, attempt) the completed try with the
        highest try number (the selection rule, :func:`agentmeter.store.queries.latest_completed`)."""
        run = self.get_run(run_id)
        return [] if run is None else queries.latest_completed(self, [run])

    def incomplete_trials(self, run_id: str) -> list[TrialRecord]:
        """Tries left pending/running (e.g. by a runner that died)."""
        return self.trials(run_id, [st for st in TrialStatus if not st.final])

    def close_incomplete_trials(self, run_id: str, error: str = "interrupted"
                                ) -> list[TrialRecord]:
        """Resume helper: mark every pending/running try ``infra_invalid`` (keeping its model
        calls, stored as they completed, and totalling them on the try so its spending stays
        accounted); the runner then re-runs the trial with the next try number. Returns the
        closed tries."""
        with self._write(f"incomplete trials of run {run_id!r}") as conn:
            return leases.close_where(conn, s.trials.c.run_id == run_id, error, utcnow())

    def delete_incomplete_trials(self, run_id: str) -> int:
        """Resume helper for when nothing of an unfinished try should remain: delete the
        pending/running tries with their model calls and artifact rows. Returns the count."""
        t, mc, ar = s.trials, s.model_calls, s.artifacts
        with self._write(f"incomplete trials of run {run_id!r}") as conn:
            keys = conn.execute(sa.select(t.c.id, t.c.try_number).where(
                t.c.run_id == run_id, t.c.status.in_(NOT_FINAL))).all()
            for trial_id, try_number in keys:
                for table, id_col in ((mc, mc.c.trial_id), (ar, ar.c.trial_id),
                                      (t, t.c.id)):
                    conn.execute(sa.delete(table).where(
                        table.c.run_id == run_id, id_col == trial_id,
                        table.c.try_number == try_number))
        return len(keys)

    # --- model calls ---------------------------------------------------------------------

    def add_model_calls(self, run_id: str, calls: Sequence[ModelCallRecord],
                        try_number: int = 0) -> None:
        """Record metered calls (idempotent: a call is keyed by trial, try and seq)."""
        self._add_call_rows([s.model_call_to_row(run_id, try_number, c) for c in calls],
                            f"model calls of run {run_id!r}")

    def add_call_batch(self, calls: Sequence[tuple[str, int, ModelCallRecord]]) -> None:
        """Record calls of any runs and tries, each given as (run id, try number, call), in one
        transaction: all of them or none (the gateway's group commit, ``gateway.persist``)."""
        runs = sorted({run_id for run_id, _, _ in calls})
        self._add_call_rows([s.model_call_to_row(r, t, c) for r, t, c in calls],
                            f"model calls of run{'s' if len(runs) > 1 else ''} "
                            f"{', '.join(map(repr, runs))}")

    def add_call_batch_now(self, calls: Sequence[tuple[str, int, ModelCallRecord]]) -> bool:
        """``add_call_batch`` only if it needs no wait for another writer: on SQLite when the
        write lock is free right now (True: committed); False, nothing written, when it is
        held, and always on PostgreSQL (a network round trip). For the gateway's commit of a
        lone call on its event loop (``gateway.persist``), which must never block there."""
        if not calls or self._engine.dialect.name != "sqlite":
            return False
        runs = sorted({run_id for run_id, _, _ in calls})
        return self._sqlite_upsert(s.model_calls, [s.model_call_to_row(r, t, c) for r, t, c in calls],
                                   f"model calls of run{'s' if len(runs) > 1 else ''} "
                                   f"{', '.join(map(repr, runs))}", wait=False)

    def _add_call_rows(self, rows: list[dict[str, Any]], what: str) -> None:
        if rows and self._engine.dialect.name == "sqlite":
            self._sqlite_upsert(s.model_calls, rows, what)
            return
        with self._write(what) as conn:
            self._upsert(conn, s.model_calls, rows)

    def model_calls(self, run_id: str, trial_id: str | None = None,
                    try_number: int | None = None) -> list[ModelCallRecord]:
        return queries.model_calls(self, run_id, trial_id, try_number)

    # --- artifacts -----------------------------------------------------------------------

    def _runs_dir(self) -> Path:
        if self.runs_dir is None:
            raise StoreError(f"{self.where}: no runs directory for artifacts; open the store "
                             "with runs_dir=...")
        return self.runs_dir

    def run_dir(self, run_id: str) -> Path:
        """The run's artifact directory; ``ArtifactRecord.relpath`` is relative to it."""
        return run_dir(self._runs_dir(), run_id)

    def artifact_dir(self, run_id: str, trial_id: str, try_number: int = 0,
                     create: bool = True) -> Path:
        path = trial_dir(self._runs_dir(), run_id, trial_id, try_number)
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return path

    def add_artifact(self, run_id: str, artifact: ArtifactRecord, try_number: int = 0) -> None:
        with self._write(f"artifact {artifact.name!r} of trial {artifact.trial_id!r}") as conn:
            self._upsert(conn, s.artifacts, [s.artifact_to_row(run_id, try_number, artifact)])

    def artifacts(self, run_id: str, trial_id: str | None = None,
                  try_number: int | None = None) -> list[ArtifactRecord]:
        return queries.artifacts(self, run_id, trial_id, try_number)

    # --- bulk writes: imports and repricing ---------------------------------------------

    def import_run(self, run: RunRecord, configs: Sequence[ConfigRecord],
                   tasks: Sequence[TaskRecord], trials: Sequence[TrialRecord]) -> RunRecord:
        """Write a whole run (an imported one) in one transaction: all of it or nothing."""
        if not RUN_ID_PATTERN.match(run.id):
            raise StoreError(f"run id {run.id!r}: use letters, digits, '.', '_' and '-' "
                             "(it names a directory)")
        if self.get_run(run.id) is not None:
            raise StoreError(f"run {run.id!r} already exists in {self.where}")
        now = utcnow()
        with self._write(f"import of run {run.id!r}") as conn:
            conn.execute(sa.insert(s.runs).values(**s.run_to_row(run)))
            # ids are digests of the definition: an existing config/task version is kept
            self._insert_missing(conn, s.configs, [s.config_to_row(c) for c in configs])
            self._upsert(conn, s.run_configs, [{"run_id": run.id, "config_id": c.id}
                                               for c in configs])
            self._insert_missing(conn, s.tasks, [s.task_to_row(t) for t in tasks])
            self._upsert(conn, s.run_tasks, [{"run_id": run.id, "task_id": t.id,
                                              "task_digest": t.digest} for t in tasks])
            if trials:
                conn.execute(sa.insert(s.trials), [s.trial_to_row(t, now) for t in trials])
        return run

    def _insert_missing(self, conn: sa.Connection, table: sa.Table,
                        rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        keys = [c.name for c in table.primary_key.columns]
        ins = sqlite.insert(table) if conn.dialect.name == "sqlite" else postgresql.insert(table)
        conn.execute(ins.on_conflict_do_nothing(index_elements=keys), list(rows))

    def reprice_run(self, run_id: str, trial_costs: dict[tuple[str, int], float | None],
                    call_costs: dict[tuple[str, int, int], float | None],
                    pricing_snapshot: str, settings: dict[str, Any]) -> None:
        """Replace stored costs (trials keyed by (trial id, try), model calls by (trial id, try,
        seq)) and record the pricing snapshot and settings on the run, in one transaction."""
        t, mc = s.trials, s.model_calls
        now = utcnow()
        with self._write(f"repricing of run {run_id!r}") as conn:
            done = conn.execute(sa.update(s.runs).where(s.runs.c.id == run_id).values(
                pricing_snapshot=pricing_snapshot, settings=settings))
            if done.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.where}")
            if call_costs:
                conn.execute(sa.update(mc).where(
                    mc.c.run_id == run_id, mc.c.trial_id == sa.bindparam("k_trial"),
                    mc.c.try_number == sa.bindparam("k_try"), mc.c.seq == sa.bindparam("k_seq")
                ).values(cost_usd=sa.bindparam("v_cost")),
                    [{"k_trial": k[0], "k_try": k[1], "k_seq": k[2], "v_cost": v}
                     for k, v in call_costs.items()])
            if trial_costs:
                conn.execute(sa.update(t).where(
                    t.c.run_id == run_id, t.c.id == sa.bindparam("k_trial"),
                    t.c.try_number == sa.bindparam("k_try")
                ).values(cost_usd=sa.bindparam("v_cost"), updated_at=now),
                    [{"k_trial": k[0], "k_try": k[1], "v_cost": v}
                     for k, v in trial_costs.items()])

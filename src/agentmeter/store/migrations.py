"""Schema migrations: an ordered list of functions, each taking the schema one version up.

Version 0 is an empty database. ``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1``; each runs
in its own transaction together with the ``schema_version`` update, so an interrupted upgrade
leaves the database at the last complete version. The DDL here is frozen: a later change to the
schema is a new migration, never an edit of an old one.

History:
  1. runs, configs, tasks (keyed by id + digest), run links, trials (usage as columns)
  2. model calls and artifacts (keyed by run, trial, try), query indexes on trials
  3. model_calls.purpose: 'agent' or 'judge' (a judge's calls are evaluation cost)
  4. trials.lease_owner, trials.lease_expires_at (tries held by cluster workers); run_locks
     (who holds a run on a shared store)
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from agentmeter.store.schema import SCHEMA_VERSION, SQLITE_BEGIN_OPTION, UtcDateTime

Migration = Callable[[sa.Connection], None]

_USAGE = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens",
          "reasoning_tokens")


def _v1_core_tables(conn: sa.Connection) -> None:
    md = sa.MetaData()
    sa.Table("schema_version", md, sa.Column("version", sa.Integer, nullable=False))
    sa.Table(
        "runs", md,
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("finished_at", UtcDateTime),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("backend", sa.String(50), nullable=False),
        sa.Column("source", sa.String(100), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("pricing_snapshot", sa.String(200)),
        sa.Column("settings", sa.JSON, nullable=False),
    )
    sa.Table(
        "configs", md,
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("label", sa.String(300), nullable=False),
        sa.Column("model_name", sa.String(300), nullable=False),
        sa.Column("model_wire_api", sa.String(20)),
        sa.Column("model_price_key", sa.String(300)),
        sa.Column("agent_name", sa.String(200), nullable=False),
        sa.Column("agent_version", sa.String(100)),
        sa.Column("agent_options", sa.JSON, nullable=False),
    )
    sa.Table(
        "tasks", md,
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("digest", sa.String(100), primary_key=True),
        sa.Column("suite", sa.String(200)),
        sa.Column("tier", sa.String(10)),
        sa.Column("category", sa.String(200)),
        sa.Column("source", sa.String(200)),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("path", sa.Text),
    )
    sa.Table(
        "run_configs", md,
        sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("config_id", sa.String(200), sa.ForeignKey("configs.id"), primary_key=True),
    )
    sa.Table(
        "run_tasks", md,
        sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("task_id", sa.String(200), primary_key=True),
        sa.Column("task_digest", sa.String(100), nullable=False),
        sa.ForeignKeyConstraint(["task_id", "task_digest"], ["tasks.id", "tasks.digest"]),
    )
    sa.Table(
        "trials", md,
        sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("id", sa.String(500), primary_key=True),
        sa.Column("try_number", sa.Integer, primary_key=True),
        sa.Column("config_id", sa.String(200), sa.ForeignKey("configs.id"), nullable=False),
        sa.Column("task_id", sa.String(200), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reward", sa.Float),
        sa.Column("rewards", sa.JSON, nullable=False),
        sa.Column("passed", sa.Boolean),
        sa.Column("error", sa.Text),
        *(sa.Column(name, sa.Integer) for name in _USAGE),
        sa.Column("cost_usd", sa.Float),
        sa.Column("model_calls", sa.Integer, nullable=False),
        sa.Column("tool_calls", sa.JSON, nullable=False),
        sa.Column("turns", sa.Integer),
        sa.Column("started_at", UtcDateTime),
        sa.Column("finished_at", UtcDateTime),
        *(sa.Column(f"{name}_s", sa.Float) for name in (
            "environment", "agent_setup", "agent_run", "verification", "agent_command",
            "verifier_command")),
        sa.Column("owner_pid", sa.Integer),
        sa.Column("extra", sa.JSON, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    md.create_all(conn)


def _v2_calls_and_artifacts(conn: sa.Connection) -> None:
    md = sa.MetaData()
    # referenced tables must be known to this MetaData for the foreign keys to resolve
    sa.Table("runs", md, sa.Column("id", sa.String(200), primary_key=True))
    sa.Table(
        "model_calls", md,
        sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("trial_id", sa.String(500), primary_key=True),
        sa.Column("try_number", sa.Integer, primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("wire_api", sa.String(20), nullable=False),
        sa.Column("client_api", sa.String(20), nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("upstream_model", sa.String(300), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sa.Column("latency_s", sa.Float, nullable=False),
        sa.Column("ttft_s", sa.Float),
        *(sa.Column(name, sa.Integer) for name in _USAGE),
        sa.Column("cost_usd", sa.Float),
        sa.Column("bytes_in", sa.Integer, nullable=False),
        sa.Column("bytes_out", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("scripted", sa.Boolean, nullable=False),
    )
    sa.Table(
        "artifacts", md,
        sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("trial_id", sa.String(500), primary_key=True),
        sa.Column("try_number", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(300), primary_key=True),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("relpath", sa.Text, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
    )
    for table in ("model_calls", "artifacts"):
        md.tables[table].create(conn)
    conn.execute(sa.text("CREATE INDEX ix_trials_run_status ON trials (run_id, status)"))
    conn.execute(sa.text(
        "CREATE INDEX ix_trials_run_cell ON trials (run_id, config_id, task_id, attempt)"))


def _v3_call_purpose(conn: sa.Connection) -> None:
    # existing calls were all the agent's; the same DDL on SQLite and PostgreSQL
    conn.execute(sa.text(
        "ALTER TABLE model_calls ADD COLUMN purpose VARCHAR(10) NOT NULL DEFAULT 'agent'"))


def _v4_leases(conn: sa.Connection) -> None:
    conn.execute(sa.text("ALTER TABLE trials ADD COLUMN lease_owner VARCHAR(300)"))
    stamp = UtcDateTime().compile(dialect=conn.dialect)
    conn.execute(sa.text(f"ALTER TABLE trials ADD COLUMN lease_expires_at {stamp}"))
    md = sa.MetaData()
    sa.Table(
        "run_locks", md,
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("host", sa.String(300), nullable=False),
        sa.Column("since", UtcDateTime, nullable=False),
    )
    md.create_all(conn)


MIGRATIONS: list[Migration] = [_v1_core_tables, _v2_calls_and_artifacts, _v3_call_purpose,
                               _v4_leases]
assert len(MIGRATIONS) == SCHEMA_VERSION, "schema.SCHEMA_VERSION must match the migrations"


class SchemaError(Exception):
    """The database is not (a supported version of) an agentmeter database."""


#: takes migrations one at a time on a shared PostgreSQL store (many workers open it at once)
_MIGRATION_LOCK_KEY = 0x61676D6D69677231  # "agmmigr1"


def current_version(conn: sa.Connection) -> int:
    """The schema version of a database; 0 for an empty one. A database that is not an
    agentmeter store (foreign tables, an empty or odd ``schema_version``, tables of its version
    missing) is a :class:`SchemaError`."""
    names = set(sa.inspect(conn).get_table_names())
    if "schema_version" not in names:
        if names:
            raise SchemaError("not an agentmeter database (it has tables "
                              f"{sorted(names)} but no schema_version)")
        return 0
    versions = conn.execute(sa.text("SELECT version FROM schema_version")).scalars().all()
    if len(versions) != 1 or not isinstance(versions[0], int) or versions[0] < 1:
        raise SchemaError(f"unknown schema version {versions!r} in its schema_version table "
                          "(not a store written by agentmeter)")
    version = versions[0]
    if version <= SCHEMA_VERSION:
        # the tables again, after the version: another process may have committed a migration
        # since the first listing (tables only grow, so a listing taken after is never short)
        names = set(sa.inspect(conn).get_table_names())
        missing = sorted(set(_TABLES_AT[version]) - names)
        if missing:
            raise SchemaError(f"schema version {version} but its tables {missing} are missing "
                              "(not a store written by agentmeter)")
    return version


#: the tables a store has at each version (a damaged or foreign store lacks some)
_TABLES_AT: dict[int, tuple[str, ...]] = {
    1: ("schema_version", "runs", "configs", "tasks", "run_configs", "run_tasks", "trials")}
_TABLES_AT[2] = _TABLES_AT[3] = (*_TABLES_AT[1], "model_calls", "artifacts")
_TABLES_AT[4] = (*_TABLES_AT[3], "run_locks")
assert set(_TABLES_AT) == set(range(1, SCHEMA_VERSION + 1))


def migrate(engine: sa.Engine, target: int = SCHEMA_VERSION) -> int:
    """Apply pending migrations up to ``target``; returns the version reached. A store of a
    newer or unknown version is refused (:class:`SchemaError`) before anything is written."""
    if not 0 <= target <= SCHEMA_VERSION:
        raise ValueError(f"target must be in 0..{SCHEMA_VERSION}")
    with engine.connect() as conn:
        version = current_version(conn)
        conn.rollback()
    if version > SCHEMA_VERSION:
        raise SchemaError(f"schema version {version} is newer than this agentmeter supports "
                          f"({SCHEMA_VERSION}); upgrade agentmeter")
    while version < target:
        with engine.connect().execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"}) as conn, \
                conn.begin():
            if conn.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE serialises already
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK_KEY)))
            # re-read inside the write transaction: another process may have migrated meanwhile
            version = current_version(conn)
            if version >= target:
                break
            MIGRATIONS[version](conn)
            version += 1
            conn.execute(sa.text("DELETE FROM schema_version"))
            conn.execute(sa.text("INSERT INTO schema_version (version) VALUES (:v)"),
                         {"v": version})
    return version

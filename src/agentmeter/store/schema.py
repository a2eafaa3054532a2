"""The current relational schema (SQLAlchemy Core) and record <-> row conversion.

Usage and timings are plain nullable columns so metrics can aggregate them in SQL; free-form
extras are JSON. The DDL that *creates* these tables lives in ``migrations.py`` (frozen per
version); ``tests/test_store.py`` checks that migrating an empty database yields exactly these
tables and columns.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, RowMapping

from agentmeter.records import (
    USAGE_COLUMNS,
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

#: The schema version this code reads and writes (== len(migrations.MIGRATIONS)).
SCHEMA_VERSION = 4

#: Connection execution option: how SQLite opens a transaction ("DEFERRED" for reads,
#: "IMMEDIATE" for writes, so writers queue on the busy timeout instead of failing to upgrade).
SQLITE_BEGIN_OPTION = "agentmeter_sqlite_begin"


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps no zone; naive = UTC)."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


metadata = sa.MetaData()

schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer,
                                                                nullable=False))

runs = sa.Table(
    "runs", metadata,
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

configs = sa.Table(
    "configs", metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("label", sa.String(300), nullable=False),
    sa.Column("model_name", sa.String(300), nullable=False),
    sa.Column("model_wire_api", sa.String(20)),
    sa.Column("model_price_key", sa.String(300)),
    sa.Column("agent_name", sa.String(200), nullable=False),
    sa.Column("agent_version", sa.String(100)),
    sa.Column("agent_options", sa.JSON, nullable=False),
)

tasks = sa.Table(
    "tasks", metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("digest", sa.String(100), primary_key=True),
    sa.Column("suite", sa.String(200)),
    sa.Column("tier", sa.String(10)),
    sa.Column("category", sa.String(200)),
    sa.Column("source", sa.String(200)),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("path", sa.Text),
)

run_configs = sa.Table(
    "run_configs", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("config_id", sa.String(200), sa.ForeignKey("configs.id"), primary_key=True),
)

run_tasks = sa.Table(
    "run_tasks", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("task_id", sa.String(200), primary_key=True),
    sa.Column("task_digest", sa.String(100), nullable=False),
    sa.ForeignKeyConstraint(["task_id", "task_digest"], ["tasks.id", "tasks.digest"]),
)

#: the phases of ``PhaseTimings``; the trials table has a ``<phase>_s`` column for each
TIMING_FIELDS = tuple(PhaseTimings.model_fields)

trials = sa.Table(
    "trials", metadata,
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
    *(sa.Column(name, sa.Integer) for name in USAGE_COLUMNS.values()),
    sa.Column("cost_usd", sa.Float),
    sa.Column("model_calls", sa.Integer, nullable=False),
    sa.Column("tool_calls", sa.JSON, nullable=False),
    sa.Column("turns", sa.Integer),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime),
    *(sa.Column(f"{name}_s", sa.Float) for name in TIMING_FIELDS),
    sa.Column("owner_pid", sa.Integer),
    sa.Column("extra", sa.JSON, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("lease_owner", sa.String(300)),
    sa.Column("lease_expires_at", UtcDateTime),
)

model_calls = sa.Table(
    "model_calls", metadata,
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
    *(sa.Column(name, sa.Integer) for name in USAGE_COLUMNS.values()),
    sa.Column("cost_usd", sa.Float),
    sa.Column("bytes_in", sa.Integer, nullable=False),
    sa.Column("bytes_out", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("scripted", sa.Boolean, nullable=False),
    sa.Column("purpose", sa.String(10), nullable=False, server_default="agent"),
)

artifacts = sa.Table(
    "artifacts", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("trial_id", sa.String(500), primary_key=True),
    sa.Column("try_number", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(300), primary_key=True),
    sa.Column("kind", sa.String(30), nullable=False),
    sa.Column("relpath", sa.Text, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
)


#: who holds a run's lock on a shared (PostgreSQL) store, for the refusal message; the lock
#: itself is an advisory lock held by the runner's connection (``store.runlock``)
run_locks = sa.Table(
    "run_locks", metadata,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.String(300), nullable=False),
    sa.Column("since", UtcDateTime, nullable=False),
)


# --- conversions ---------------------------------------------------------------------------

#: what PostgreSQL refuses in text and JSON (NUL) and no UTF-8 can hold (lone surrogates, as
#: ``os.fsdecode`` makes of undecodable bytes); SQLite would take the first and refuse the second
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape_unstorable(m: re.Match[str]) -> str:
    cp = ord(m.group())
    if 0xDC80 <= cp <= 0xDCFF:  # an undecodable byte: as sandbox/fsnames.py writes it
        return f"\\x{cp - 0xDC00:02x}"
    return f"\\x{cp:02x}" if cp == 0 else f"\\u{cp:04x}"


def _clean(text: str) -> bool:
    """Whether ``text`` holds nothing ``_UNSTORABLE``: an ASCII string (a flag of the string,
    no scan) can hold no surrogate, so only NUL is looked for, at C speed (the regular
    expression costs ~1 us a string, most of a model call's row conversion)."""
    return "\x00" not in text if text.isascii() else _UNSTORABLE.search(text) is None


def storable(value: Any) -> Any:
    """``value`` with every string in it (dict keys too, in lists and dicts at any depth) made
    storable the same way on every database: NUL becomes ``\\x00``, a lone surrogate
    ``\\xNN`` (an undecodable byte) or ``\\uNNNN``. Anything an agent made can reach a
    record (its errors, tool names, file names in notes); the rest is returned as it is."""
    if isinstance(value, str):
        return value if _clean(value) else _UNSTORABLE.sub(_escape_unstorable, value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value



def storable_row(row: dict[str, Any]) -> dict[str, Any]:
    """``storable`` of a row whose keys are column names (storable already), in place: each
    value checked once, only containers recursed into (a model call's row is written per call
    as it completes: ``storable`` of the whole row was most of its conversion)."""
    for k, v in row.items():
        if isinstance(v, str):
            if not _clean(v):
                row[k] = storable(v)
        elif isinstance(v, _CONTAINERS):
            row[k] = storable(v)
    return row


#: a tuple, not ``dict | list | tuple``: ``isinstance`` of a union costs ~10x more, per value
_CONTAINERS = (dict, list, tuple)


def usage_to_columns(usage: TokenUsage) -> dict[str, int | None]:
    """A usage as the values of its columns in the trials and model_calls tables."""
    return {col: getattr(usage, f) for f, col in USAGE_COLUMNS.items()}


def usage_from_row(row: RowMapping) -> TokenUsage:
    """The usage held in a trials or model_calls row."""
    return TokenUsage(**{f: row[col] for f, col in USAGE_COLUMNS.items()})


def run_to_row(run: RunRecord) -> dict[str, Any]:
    return run.model_dump(mode="python")


def run_from_row(row: RowMapping) -> RunRecord:
    return RunRecord.model_validate(dict(row))


def config_to_row(config: ConfigRecord) -> dict[str, Any]:
    return {
        "id": config.id, "label": config.label,
        "model_name": config.model.name, "model_wire_api": config.model.wire_api,
        "model_price_key": config.model.price_key,
        "agent_name": config.agent.name, "agent_version": config.agent.version,
        "agent_options": config.agent.options,
    }


def config_from_row(row: RowMapping) -> ConfigRecord:
    return ConfigRecord(
        id=row["id"], label=row["label"],
        model=ModelSpec(name=row["model_name"], wire_api=row["model_wire_api"],
                        price_key=row["model_price_key"]),
        agent=AgentSpec(name=row["agent_name"], version=row["agent_version"],
                        options=row["agent_options"]),
    )


def task_to_row(task: TaskRecord) -> dict[str, Any]:
    return task.model_dump(mode="python")


def task_from_row(row: RowMapping) -> TaskRecord:
    return TaskRecord.model_validate({c: row[c] for c in TaskRecord.model_fields})


def trial_to_row(trial: TrialRecord, updated_at: datetime) -> dict[str, Any]:
    row = trial.model_dump(mode="python", exclude={"usage", "timings"})
    row["status"] = trial.status.value
    row.update(usage_to_columns(trial.usage))
    row.update({f"{name}_s": getattr(trial.timings, name) for name in TIMING_FIELDS})
    row["updated_at"] = updated_at
    return storable(row)  # type: ignore[no-any-return]


def trial_from_row(row: RowMapping) -> TrialRecord:
    data = {name: row[name] for name in TrialRecord.model_fields
            if name not in ("usage", "timings")}
    data["status"] = TrialStatus(row["status"])
    return TrialRecord(
        **data,
        usage=usage_from_row(row),
        timings=PhaseTimings(**{name: row[f"{name}_s"] for name in TIMING_FIELDS}),
    )


#: a model call's fields stored as they are (its usage goes to ``USAGE_COLUMNS``)
_CALL_FIELDS = tuple(name for name in ModelCallRecord.model_fields if name != "usage")


def model_call_to_row(run_id: str, try_number: int, call: ModelCallRecord) -> dict[str, Any]:
    """``model_dump``'s values (all of them plain: strings, numbers, booleans, a datetime,
    None) read straight from the record, in the same order: a row is made per call as it
    completes, and ``model_dump`` cost more than the rest of it."""
    row = {name: getattr(call, name) for name in _CALL_FIELDS}
    usage = call.usage
    for name, column in USAGE_COLUMNS.items():
        row[column] = getattr(usage, name)
    row["run_id"] = run_id
    row["try_number"] = try_number
    return storable_row(row)


def model_call_from_row(row: RowMapping) -> ModelCallRecord:
    data = {name: row[name] for name in ModelCallRecord.model_fields if name != "usage"}
    return ModelCallRecord(**data, usage=usage_from_row(row))


def artifact_to_row(run_id: str, try_number: int, artifact: ArtifactRecord) -> dict[str, Any]:
    return storable(  # type: ignore[no-any-return]
        {**artifact.model_dump(mode="python"), "run_id": run_id, "try_number": try_number})


def artifact_from_row(row: RowMapping) -> ArtifactRecord:
    return ArtifactRecord.model_validate({c: row[c] for c in ArtifactRecord.model_fields})

"""Tries held by cluster workers: leases, the owner fence, closing dead tries.

A worker on another machine holds its try with a lease: ``lease_owner`` names the worker,
``lease_expires_at`` is when the try counts as abandoned unless the worker renews it
(:meth:`Store.renew_leases <agentmeter.store.db.Store.renew_leases>`, every few seconds). Times
are the database server's clock, so the machines' clocks need not agree.

Whoever closes a try that is not its own (a lease that expired, a worker the scheduler saw die,
a resume) clears ``lease_owner``; a write by the former owner is then refused (the fence, in
:func:`fenced_save`): a worker whose try was closed as dead never overwrites that verdict, and no
try is counted twice. Model calls are not fenced: a served call is real spending and is always
stored, whatever happens to its try; closing a try totals its stored calls on it, and a refused
late write totals them again (the calls its owner made after the close included).

Each function runs inside the caller's write transaction. On PostgreSQL the rows are locked
(``FOR UPDATE``) so a closer and the owner's last write serialise; the one that comes second
sees the other's result (READ COMMITTED re-checks the row). SQLite serialises every write
already (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from agentmeter.records import ModelCallRecord, TokenUsage, TrialRecord, TrialStatus
from agentmeter.store import schema as s
from agentmeter.store.expressions import NOT_FINAL

#: ``TrialRecord.extra`` keys of the books: the seqs of the calls still under way when the try
#: ended (``IN_FLIGHT``), and why its totals are n/a while any of them is not stored (``NA``)
IN_FLIGHT = "calls_in_flight"
NA = "usage_na_reason"
#: the prefix of the error of a call cancelled at the end of a run (``gateway.calls``)
HARNESS_CANCELLED = "cancelled by the harness"


def call_totals(calls: Sequence[ModelCallRecord]) -> dict[str, Any]:
    """A try's usage, cost and call count from its stored agent calls (a judge's are evaluation
    cost), summed as the gateway sums them (``gateway.metering.TrialState``): the cost is n/a
    when a served call's is unknown."""
    calls = [c for c in calls if c.purpose == "agent"]
    usage = TokenUsage()
    for c in calls:
        usage = usage + c.usage
    unknown = any(c.status_code == 200 and c.cost_usd is None for c in calls)
    cost = None if unknown else sum(c.cost_usd or 0.0 for c in calls)
    return {"usage": usage, "cost_usd": cost, "model_calls": len(calls)}


def db_now(conn: sa.Connection) -> datetime:
    """The database's clock (UTC): one clock for every machine that shares the store."""
    if conn.dialect.name == "postgresql":
        value = conn.execute(sa.select(sa.func.timezone("UTC", sa.func.now()))).scalar_one()
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _locked(conn: sa.Connection, stmt: sa.Select[Any]) -> sa.Select[Any]:
    return stmt.with_for_update() if conn.dialect.name == "postgresql" else stmt


def close_where(conn: sa.Connection, condition: sa.ColumnElement[bool], error: str,
                now: datetime) -> list[TrialRecord]:
    """Close the not-final tries matching ``condition`` as infra_invalid with ``error``: their
    stored model calls totalled on them (spending kept), their lease owner cleared (fenced)."""
    t = s.trials
    rows = list(conn.execute(_locked(conn, sa.select(t).where(
        condition, t.c.status.in_(NOT_FINAL)))).mappings())
    closed: list[TrialRecord] = []
    for row in rows:
        calls = _stored_calls(conn, row["run_id"], row["id"], row["try_number"])
        totals = call_totals(calls) if calls else {}
        trial = s.trial_from_row(row).model_copy(update={
            "status": TrialStatus.INFRA_INVALID, "error": error, "passed": None,
            "finished_at": now, "lease_owner": None, **totals})
        values = s.trial_to_row(trial, now)
        conn.execute(sa.update(t).where(
            t.c.run_id == trial.run_id, t.c.id == trial.id,
            t.c.try_number == trial.try_number).values(
            {k: v for k, v in values.items() if k not in ("run_id", "id", "try_number")}))
        closed.append(trial)
    return closed


def close_expired(conn: sa.Connection, run_id: str, error: str, now: datetime | None
                  ) -> list[TrialRecord]:
    """Close the run's leased tries whose lease lapsed before ``now`` (default: the database's
    clock). Tries without a lease (the local executor's) are left alone."""
    t = s.trials
    when = now if now is not None else db_now(conn)
    return close_where(conn, sa.and_(t.c.run_id == run_id, t.c.lease_owner.is_not(None),
                                     t.c.lease_expires_at < when), error, when)


def renew(conn: sa.Connection, run_id: str, trial_ids: Collection[str], owner: str,
          ttl_s: float, now: datetime | None) -> list[str]:
    """Extend to now + ``ttl_s`` the leases of the run's not-final tries ``trial_ids`` held by
    ``owner`` or by nobody (the first renewal claims); the ids it could not renew, in order."""
    if not trial_ids:
        return []
    t = s.trials
    when = now if now is not None else db_now(conn)
    renewed = set(conn.execute(
        sa.update(t).where(t.c.run_id == run_id, t.c.id.in_(list(trial_ids)),
                           t.c.status.in_(NOT_FINAL),
                           sa.or_(t.c.lease_owner == owner, t.c.lease_owner.is_(None)))
        .values(lease_owner=owner, lease_expires_at=when + timedelta(seconds=ttl_s))
        .returning(t.c.id)).scalars())
    return [i for i in trial_ids if i not in renewed]


def fenced_save(conn: sa.Connection, trial: TrialRecord, owner: str, now: datetime) -> bool:
    """Write ``trial`` as ``owner``'s unless the store has the try leased to another owner or
    closed by someone else (an unowned try not yet final is claimed). The stored lease expiry
    never moves back (renewals run beside the owner's writes). Returns whether it was written."""
    t = s.trials
    key = (t.c.run_id == trial.run_id, t.c.id == trial.id, t.c.try_number == trial.try_number)
    values = s.trial_to_row(trial, now)
    values["lease_owner"] = owner
    query = _locked(conn, sa.select(t.c.status, t.c.lease_owner, t.c.lease_expires_at)
                    .where(*key))
    row = conn.execute(query).first()
    if row is None:
        inserted = conn.execute(_insert_new(conn).values(values))
        if inserted.rowcount == 1:
            return True
        row = conn.execute(query).first()  # another writer inserted it meanwhile
        assert row is not None
    if row.lease_owner != owner and not (row.lease_owner is None and row.status in NOT_FINAL):
        if row.lease_owner is None and row.status == TrialStatus.INFRA_INVALID.value:
            _retotal(conn, trial, now)  # calls served after it was closed count on it too
        return False
    stored_expiry, expiry = row.lease_expires_at, trial.lease_expires_at
    if expiry is not None and expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=UTC)  # naive = UTC, as the store reads it back
    if stored_expiry is not None and (expiry is None or expiry < stored_expiry):
        values["lease_expires_at"] = stored_expiry
    conn.execute(sa.update(t).where(*key).values(
        {k: v for k, v in values.items() if k not in ("run_id", "id", "try_number")}))
    return True


def _stored_calls(conn: sa.Connection, run_id: str, trial_id: str, try_number: int
                  ) -> list[ModelCallRecord]:
    mc = s.model_calls
    return [s.model_call_from_row(r) for r in conn.execute(sa.select(mc).where(
        mc.c.run_id == run_id, mc.c.trial_id == trial_id,
        mc.c.try_number == try_number)).mappings()]


def _retotal(conn: sa.Connection, trial: TrialRecord, now: datetime) -> None:
    """Total a closed try's stored calls on it again (its former owner went on serving)."""
    calls = _stored_calls(conn, trial.run_id, trial.id, trial.try_number)
    if not calls:
        return
    totals = call_totals(calls)
    t = s.trials
    conn.execute(sa.update(t).where(
        t.c.run_id == trial.run_id, t.c.id == trial.id, t.c.try_number == trial.try_number
    ).values(**s.usage_to_columns(totals["usage"]), cost_usd=totals["cost_usd"],
             model_calls=totals["model_calls"], updated_at=now))


def book_totals(calls: Sequence[ModelCallRecord], in_flight: Collection[int]
                ) -> tuple[dict[str, Any], str | None]:
    """A try's totals from its stored calls when every call it started is stored, else n/a
    (usage unknown, cost None) with the reason; the call count counts every started call."""
    agent = [c for c in calls if c.purpose == "agent"]
    stored = {c.seq for c in agent}
    missing = sorted(set(in_flight) - stored)
    totals = call_totals(agent)
    cut = [c.seq for c in agent if c.error is not None and HARNESS_CANCELLED in c.error
           and c.usage.input is None and c.usage.output is None]
    if missing:
        reason = (f"{len(missing)} model call(s) (seq {', '.join(map(str, missing))}) were "
                  "still under way when the trial ended: its totals are n/a until they complete")
    elif cut:
        reason = (f"model call(s) seq {', '.join(map(str, cut))} were cancelled at the end of "
                  "the run before their usage was known")
    else:
        return totals, None
    return {"usage": TokenUsage(), "cost_usd": None,
            "model_calls": len(agent) + len(missing)}, reason


def settle_books(conn: sa.Connection, run_id: str, trial_id: str, try_number: int,
                 now: datetime) -> TrialRecord | None:
    """Total a try that ended with calls under way on its stored calls again (called as each
    late call is stored, and after each write of the try by its runner): in one transaction,
    so whichever write comes last leaves the right totals."""
    t = s.trials
    key = (t.c.run_id == run_id, t.c.id == trial_id, t.c.try_number == try_number)
    row = conn.execute(_locked(conn, sa.select(t).where(*key))).mappings().first()
    if row is None:
        return None
    trial = s.trial_from_row(row)
    in_flight = trial.extra.get(IN_FLIGHT)
    if not in_flight:
        return trial
    totals, reason = book_totals(_stored_calls(conn, run_id, trial_id, try_number), in_flight)
    extra = {k: v for k, v in trial.extra.items() if k != NA}
    if reason is not None:
        extra[NA] = reason
    trial = trial.model_copy(update={**totals, "extra": extra})
    conn.execute(sa.update(t).where(*key).values(
        **s.usage_to_columns(trial.usage), cost_usd=trial.cost_usd,
        model_calls=trial.model_calls, extra=s.trial_to_row(trial, now)["extra"],
        updated_at=now))
    return trial


def _insert_new(conn: sa.Connection) -> Any:
    """INSERT of a try that does nothing if the try exists already."""
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(s.trials).on_conflict_do_nothing(
        index_elements=["run_id", "id", "try_number"])

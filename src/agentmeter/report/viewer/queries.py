"""The viewer's SQL: one page of runs with their aggregates, progress fingerprints for live
updates. Everything is LIMIT/OFFSET or GROUP BY in the database, never a Python loop over every
trial of the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentmeter.store import schema as s
from agentmeter.store.db import Store

ACTIVE = ("pending", "running")


@dataclass(frozen=True)
class RunRow:
    id: str
    created_at: datetime
    finished_at: datetime | None
    status: str
    backend: str
    source: str
    configs: int
    tasks: int
    tries: int
    passed: int
    active: int
    infra: int
    usd: float | None
    updated_at: datetime | None


def _count(cond: Any) -> Any:
    return sa.func.coalesce(sa.func.sum(sa.case((cond, 1), else_=0)), 0)


def _aggregates(conn: sa.Connection, run_ids: Sequence[str]) -> dict[str, Any]:
    t = s.trials
    stmt = (sa.select(t.c.run_id, sa.func.count().label("tries"),
                      _count(t.c.status == "passed").label("passed"),
                      _count(t.c.status.in_(ACTIVE)).label("active"),
                      _count(t.c.status == "infra_invalid").label("infra"),
                      sa.func.sum(t.c.cost_usd).label("usd"),
                      sa.func.max(t.c.updated_at).label("updated_at"))
            .where(t.c.run_id.in_(list(run_ids))).group_by(t.c.run_id))
    return {r.run_id: r for r in conn.execute(stmt)}


def count_runs(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(s.runs)).scalar_one())


def runs_page(store: Store, offset: int, limit: int) -> list[RunRow]:
    """Newest runs first, one page, with trial aggregates for that page only."""
    r, rc, rt = s.runs, s.run_configs, s.run_tasks
    with store.engine.connect() as conn:
        runs = list(conn.execute(sa.select(r).order_by(r.c.created_at.desc(), r.c.id.desc())
                                 .limit(limit).offset(offset)))
        ids = [x.id for x in runs]
        n_cfg = {k: v for k, v in conn.execute(sa.select(rc.c.run_id, sa.func.count()).where(
            rc.c.run_id.in_(ids)).group_by(rc.c.run_id))}
        n_task = {k: v for k, v in conn.execute(sa.select(rt.c.run_id, sa.func.count()).where(
            rt.c.run_id.in_(ids)).group_by(rt.c.run_id))}
        agg = _aggregates(conn, ids)
    out = []
    for x in runs:
        a = agg.get(x.id)
        out.append(RunRow(id=x.id, created_at=x.created_at, finished_at=x.finished_at,
                          status=x.status, backend=x.backend, source=x.source,
                          configs=int(n_cfg.get(x.id, 0)), tasks=int(n_task.get(x.id, 0)),
                          tries=int(a.tries) if a else 0, passed=int(a.passed) if a else 0,
                          active=int(a.active) if a else 0, infra=int(a.infra) if a else 0,
                          usd=float(a.usd) if a and a.usd is not None else None,
                          updated_at=a.updated_at if a else None))
    return out


def store_fingerprint(store: Store) -> str:
    """Changes whenever a run or a trial is added or updated anywhere in the store."""
    r, t = s.runs, s.trials
    with store.engine.connect() as conn:
        runs = conn.execute(sa.select(sa.func.count(), sa.func.max(r.c.created_at),
                                      _count(r.c.status == "running"))).one()
        trials = conn.execute(sa.select(sa.func.count(), sa.func.max(t.c.updated_at))).one()
    return ":".join(str(v) for v in (*runs, *trials))


def progress(store: Store, run_ids: Sequence[str]) -> dict[str, Any]:
    """Live status of some runs; ``fingerprint`` changes whenever any of their trials does."""
    r = s.runs
    with store.engine.connect() as conn:
        agg = _aggregates(conn, run_ids)
        statuses = {k: v for k, v in conn.execute(sa.select(r.c.id, r.c.status).where(
            r.c.id.in_(list(run_ids))))}
    tries = sum(int(a.tries) for a in agg.values())
    active = sum(int(a.active) for a in agg.values())
    usd_values = [float(a.usd) for a in agg.values() if a.usd is not None]
    latest = max((a.updated_at for a in agg.values() if a.updated_at is not None), default=None)
    fingerprint = f"{tries}:{active}:{latest.isoformat() if latest else '-'}:" + ",".join(
        f"{k}={v}" for k, v in sorted(statuses.items()))
    return {"fingerprint": fingerprint, "tries": tries, "done": tries - active,
            "active": active, "passed": sum(int(a.passed) for a in agg.values()),
            "usd": sum(usd_values) if usd_values else None,
            "running_runs": sum(1 for v in statuses.values() if v == "running"),
            "statuses": statuses}

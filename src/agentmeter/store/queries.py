"""The store's one read API: single records (a run, a configuration, a task version, a try,
its model calls and artifacts; ``Store``'s read methods are shorthands for these), and for
scoring, summaries, exports and repricing the runs of a scoring, their configurations and task
versions, the selected trials, the trial columns the metrics load, per-agent tool use, the
scripted configurations and the model-call usage of a run.

Runs are read oldest first (creation time, then id), and where they overlap the latest run
wins: a task's version, and — the **selection rule** (docs/architecture.md, AgentMeter §3.5) — the try
that counts for a (config, task, attempt): its latest *completed* try, from the most recently
created run that has one (:func:`~agentmeter.store.expressions.try_order`). Metrics that work
on columns get every completed try with its order (:func:`trial_columns`) and apply the rule
with ``metrics.frame.selected_mask``, because the spending of retried infra_invalid tries stays
in cost accounting; record readers get the selected tries (:func:`latest_completed`).

Everything is aggregated in SQL where the figure is an aggregate; the paged reads of the viewer
are in :mod:`agentmeter.store.browse`, built on the same rules (:mod:`agentmeter.store.expressions`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from agentmeter.records import (
    USAGE_COLUMNS,
    ArtifactRecord,
    ConfigRecord,
    ModelCallRecord,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.store import schema as s
from agentmeter.store.engine import StoreError
from agentmeter.store.expressions import (
    FINAL,
    is_final,
    is_scripted_model,
    json_entries,
    status_code,
    tool_calls_total,
    try_order,
)

if TYPE_CHECKING:
    from agentmeter.store.db import Store

#: rows :func:`trial_columns` streams at a time
CHUNK = 50_000
#: the columns of :func:`trial_columns` rows, in order
TRIAL_COLUMNS = ("config_id", "task_id", "attempt", "try_order", "status_code", "reward",
                 "passed", *USAGE_COLUMNS.values(), "cost_usd", "turns", "model_calls",
                 "tool_calls", "repeated_reads")


def _oldest_first(runs: Sequence[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: (r.created_at, r.id))


# --- single records (the Store's read methods) -----------------------------------------------


def _rows(store: Store, stmt: sa.Executable) -> list[sa.RowMapping]:
    with store.engine.connect() as conn:
        return list(conn.execute(stmt).mappings())


def get_run(store: Store, run_id: str) -> RunRecord | None:
    rows = _rows(store, sa.select(s.runs).where(s.runs.c.id == run_id))
    return s.run_from_row(rows[0]) if rows else None


def list_runs(store: Store, limit: int | None = None) -> list[RunRecord]:
    """Newest first."""
    stmt = sa.select(s.runs).order_by(s.runs.c.created_at.desc(), s.runs.c.id.desc())
    if limit is not None:
        stmt = stmt.limit(limit)
    return [s.run_from_row(r) for r in _rows(store, stmt)]


def get_config(store: Store, config_id: str) -> ConfigRecord | None:
    rows = _rows(store, sa.select(s.configs).where(s.configs.c.id == config_id))
    return s.config_from_row(rows[0]) if rows else None


def get_task(store: Store, task_id: str, digest: str) -> TaskRecord | None:
    rows = _rows(store, sa.select(s.tasks).where(s.tasks.c.id == task_id,
                                                 s.tasks.c.digest == digest))
    return s.task_from_row(rows[0]) if rows else None


def get_trial(store: Store, run_id: str, trial_id: str, try_number: int | None = None
              ) -> TrialRecord | None:
    """One try of a trial; the latest try when ``try_number`` is None."""
    t = s.trials
    stmt = sa.select(t).where(t.c.run_id == run_id, t.c.id == trial_id)
    if try_number is not None:
        stmt = stmt.where(t.c.try_number == try_number)
    rows = _rows(store, stmt.order_by(t.c.try_number.desc()).limit(1))
    return s.trial_from_row(rows[0]) if rows else None


def trials(store: Store, run_id: str,
           status: TrialStatus | Collection[TrialStatus] | None = None) -> list[TrialRecord]:
    """Every try of every trial of a run (optionally of some statuses), in a stable order."""
    t = s.trials
    stmt = sa.select(t).where(t.c.run_id == run_id)
    if status is not None:
        wanted = [status] if isinstance(status, TrialStatus) else list(status)
        stmt = stmt.where(t.c.status.in_([st.value for st in wanted]))
    stmt = stmt.order_by(t.c.config_id, t.c.task_id, t.c.attempt, t.c.try_number)
    return [s.trial_from_row(r) for r in _rows(store, stmt)]


def model_calls(store: Store, run_id: str, trial_id: str | None = None,
                try_number: int | None = None) -> list[ModelCallRecord]:
    mc = s.model_calls
    stmt = sa.select(mc).where(mc.c.run_id == run_id)
    if trial_id is not None:
        stmt = stmt.where(mc.c.trial_id == trial_id)
    if try_number is not None:
        stmt = stmt.where(mc.c.try_number == try_number)
    stmt = stmt.order_by(mc.c.trial_id, mc.c.try_number, mc.c.seq)
    return [s.model_call_from_row(r) for r in _rows(store, stmt)]


def artifacts(store: Store, run_id: str, trial_id: str | None = None,
              try_number: int | None = None) -> list[ArtifactRecord]:
    ar = s.artifacts
    stmt = sa.select(ar).where(ar.c.run_id == run_id)
    if trial_id is not None:
        stmt = stmt.where(ar.c.trial_id == trial_id)
    if try_number is not None:
        stmt = stmt.where(ar.c.try_number == try_number)
    stmt = stmt.order_by(ar.c.trial_id, ar.c.try_number, ar.c.name)
    return [s.artifact_from_row(r) for r in _rows(store, stmt)]


# --- runs, configurations, task versions -----------------------------------------------------


def require_runs(store: Store, run_ids: Sequence[str]) -> list[RunRecord]:
    """The runs, oldest first; :class:`StoreError` naming every id the store does not hold."""
    ids = list(dict.fromkeys(run_ids))
    r = s.runs
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(r).where(r.c.id.in_(ids))).mappings().all()
    found = {row["id"]: s.run_from_row(row) for row in rows}
    missing = [i for i in ids if i not in found]
    if missing:
        raise StoreError(f"no run {', '.join(map(repr, missing))} in {store.where}")
    return _oldest_first(list(found.values()))


def run_configs(store: Store, run_ids: Sequence[str], also: Collection[str] = ()
                ) -> dict[str, ConfigRecord]:
    """The configurations of the runs, and those named in ``also`` (e.g. met in trials), by
    id in id order."""
    c, rc = s.configs, s.run_configs
    named = sa.select(rc.c.config_id).where(rc.c.run_id.in_(list(run_ids)))
    stmt = sa.select(c).where(sa.or_(c.c.id.in_(named), c.c.id.in_(list(also))))
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    return {cfg.id: cfg for cfg in sorted((s.config_from_row(r) for r in rows),
                                          key=lambda cfg: cfg.id)}


@dataclass(frozen=True)
class RunTasks:
    """The task versions some runs are pinned to."""

    #: task id -> the version of the latest run that has the task
    tasks: dict[str, TaskRecord]
    #: ids of tasks whose tier differs from an earlier run's (once per change)
    tier_changes: list[str]


def run_tasks(store: Store, runs: Sequence[RunRecord]) -> RunTasks:
    rank = {r.id: k for k, r in enumerate(_oldest_first(runs))}
    t, rt = s.tasks, s.run_tasks
    stmt = (sa.select(rt.c.run_id, t)
            .join(t, sa.and_(t.c.id == rt.c.task_id, t.c.digest == rt.c.task_digest))
            .where(rt.c.run_id.in_(list(rank))))
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    tasks: dict[str, TaskRecord] = {}
    changes: list[str] = []
    for row in sorted(rows, key=lambda row: rank[row["run_id"]]):
        task = s.task_from_row(row)
        if task.id in tasks and tasks[task.id].tier != task.tier:
            changes.append(task.id)
        tasks[task.id] = task
    return RunTasks(tasks=tasks, tier_changes=changes)


# --- the selection rule ----------------------------------------------------------------------


def latest_completed(store: Store, runs: Sequence[RunRecord],
                     task_ids: Collection[str] | None = None) -> list[TrialRecord]:
    """The selected tries of the runs (optionally of some tasks only): per (config, task,
    attempt) the completed try ordered last, in (config, task, attempt) order."""
    ids = [r.id for r in _oldest_first(runs)]
    if not ids:
        return []
    t = s.trials
    order = try_order(ids)
    cell = (t.c.config_id, t.c.task_id, t.c.attempt)
    latest = (sa.select(*cell, sa.func.max(order).label("try_order"))
              .where(t.c.run_id.in_(ids), is_final(t.c.status))
              .group_by(*cell).subquery())
    stmt = (sa.select(t)
            .join(latest, sa.and_(t.c.config_id == latest.c.config_id,
                                  t.c.task_id == latest.c.task_id,
                                  t.c.attempt == latest.c.attempt,
                                  order == latest.c.try_order))
            .where(t.c.run_id.in_(ids)))
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    trials = [s.trial_from_row(r) for r in rows
              if task_ids is None or r["task_id"] in task_ids]
    return sorted(trials, key=lambda tr: (tr.config_id, tr.task_id, tr.attempt))


@dataclass(frozen=True)
class StoredTrials:
    """What the record-level metrics (funnel, AgencyBench) read of some runs."""

    #: the runs' configurations, in id order
    configs: list[ConfigRecord]
    #: task id -> the latest run's version
    tasks: dict[str, TaskRecord]
    #: the selected tries (:func:`latest_completed`)
    selected: list[TrialRecord]


def selected_trials(store: Store, run_ids: Sequence[str],
                    task_ids: Collection[str] | None = None) -> StoredTrials:
    """The configurations, task versions and selected tries of the runs (StoreError for an
    unknown run)."""
    runs = require_runs(store, run_ids)
    configs = run_configs(store, [r.id for r in runs])
    return StoredTrials(configs=list(configs.values()), tasks=run_tasks(store, runs).tasks,
                        selected=latest_completed(store, runs, task_ids))


def trial_columns(store: Store, runs: Sequence[RunRecord], chunk: int = CHUNK
                  ) -> Iterator[Sequence[sa.Row[Any]]]:
    """Every try of the runs as plain row tuples (:data:`TRIAL_COLUMNS`), ``chunk`` rows at a
    time, streamed from the database: the try order (:func:`~agentmeter.store.expressions.
    try_order`), the status code (position in ``FINAL_STATUSES``, -1 while pending/running)
    and the tool-call total are computed in SQL."""
    ids = [r.id for r in _oldest_first(runs)]
    t = s.trials
    with store.engine.connect() as conn:
        cols: list[Any] = [t.c.config_id, t.c.task_id, t.c.attempt,
                           try_order(ids).label("try_order"),
                           status_code(t.c.status).label("status_code"), t.c.reward, t.c.passed,
                           *(t.c[c] for c in USAGE_COLUMNS.values()), t.c.cost_usd, t.c.turns,
                           t.c.model_calls, tool_calls_total(conn.dialect.name).label("tool_calls"),
                           # the runner's trajectory analytics (NULL where not recorded)
                           t.c.extra[("trajectory", "repeated_reads")].as_float()
                           .label("repeated_reads")]
        result = conn.execution_options(stream_results=True, yield_per=chunk).execute(
            sa.select(*cols).where(t.c.run_id.in_(ids)))
        yield from result.partitions(chunk)


# --- aggregates for the report ---------------------------------------------------------------


def has_scenario_trials(store: Store, run_ids: Sequence[str]) -> bool:
    """Whether some try of the runs is a scenario step (``extra["scenario"]``, AgencyBench)."""
    t = s.trials
    stmt = (sa.select(t.c.id).where(t.c.run_id.in_(list(run_ids)),
                                    t.c.extra["scenario"].as_string().is_not(None)).limit(1))
    with store.engine.connect() as conn:
        return conn.execute(stmt).first() is not None


def has_difftest_trials(store: Store, run_ids: Sequence[str]) -> bool:
    """Whether some try of the runs is a differential test (CLI-Tool-Bench): its rewards have
    the funnel's ``build`` key (run here, or imported)."""
    t = s.trials
    stmt = (sa.select(t.c.id).where(t.c.run_id.in_(list(run_ids)),
                                    t.c.rewards["build"].as_float().is_not(None))
            .limit(1))
    with store.engine.connect() as conn:
        return conn.execute(stmt).first() is not None


def scripted_configs(store: Store, run_ids: Sequence[str]) -> set[str]:
    """Configurations of the runs driven by the scripted test model: by model name, or because
    one of their agents' calls was served by it (a scripted judge does not make it one)."""
    ids = list(run_ids)
    t, mc, c, rc = s.trials, s.model_calls, s.configs, s.run_configs
    served = (sa.select(t.c.config_id).distinct()
              .join(mc, sa.and_(mc.c.run_id == t.c.run_id, mc.c.trial_id == t.c.id,
                                mc.c.try_number == t.c.try_number))
              .where(t.c.run_id.in_(ids), mc.c.scripted.is_(True), mc.c.purpose == "agent"))
    named = (sa.select(c.c.id).join(rc, rc.c.config_id == c.c.id)
             .where(rc.c.run_id.in_(ids), is_scripted_model(c.c.model_name)))
    with store.engine.connect() as conn:
        return set(conn.execute(served).scalars()) | set(conn.execute(named).scalars())


@dataclass(frozen=True)
class ToolUse:
    """Invocations of one tool by one agent over completed tries."""

    agent: str
    tool: str
    calls: int
    #: completed tries of the agent (the per-trial mean's denominator)
    trials: int


def tool_usage(store: Store, run_ids: Sequence[str]) -> list[ToolUse]:
    """Tool calls per agent and tool name over completed tries, summed in SQL; by agent, then
    most used first."""
    params = {"ids": list(run_ids), "final": FINAL}
    binds: list[sa.BindParameter[Any]] = [sa.bindparam("ids", expanding=True),
                                          sa.bindparam("final", expanding=True)]
    with store.engine.connect() as conn:
        each, value = json_entries(conn.dialect.name, "t.tool_calls", "j")
        sums = sa.text(
            f"SELECT c.agent_name AS agent, j.key AS tool, SUM({value}) AS calls "
            f"FROM trials AS t JOIN configs AS c ON c.id = t.config_id CROSS JOIN {each} "
            "WHERE t.run_id IN :ids AND t.status IN :final GROUP BY c.agent_name, j.key"
        ).bindparams(*binds)
        counts = sa.text(
            "SELECT c.agent_name AS agent, COUNT(*) AS n FROM trials AS t "
            "JOIN configs AS c ON c.id = t.config_id "
            "WHERE t.run_id IN :ids AND t.status IN :final GROUP BY c.agent_name"
        ).bindparams(*binds)
        n_trials = {r.agent: int(r.n) for r in conn.execute(counts, params)}
        rows = list(conn.execute(sums, params))
    return sorted((ToolUse(agent=r.agent, tool=r.tool, calls=int(r.calls or 0),
                           trials=n_trials.get(r.agent, 0)) for r in rows if r.calls),
                  key=lambda u: (u.agent, -u.calls, u.tool))


# --- repricing -------------------------------------------------------------------------------


def call_usage_by_try(store: Store, run_id: str
                      ) -> dict[tuple[str, int], list[tuple[int, TokenUsage]]]:
    """(trial id, try number) -> [(seq, usage)] of a run's agent model calls (a judge's are
    evaluation cost, priced apart), in call order."""
    mc = s.model_calls
    stmt = (sa.select(mc.c.trial_id, mc.c.try_number, mc.c.seq,
                      *(mc.c[c] for c in USAGE_COLUMNS.values()))
            .where(mc.c.run_id == run_id, mc.c.purpose == "agent")
            .order_by(mc.c.trial_id, mc.c.try_number, mc.c.seq))
    out: dict[tuple[str, int], list[tuple[int, TokenUsage]]] = {}
    with store.engine.connect() as conn:
        for row in conn.execute(stmt).mappings():
            out.setdefault((row["trial_id"], row["try_number"]), []).append(
                (row["seq"], s.usage_from_row(row)))
    return out


# --- evaluation (judge) cost -----------------------------------------------------------------


@dataclass(frozen=True)
class EvaluationCost:
    """What judging a configuration's tries cost (every try's, as spending is counted), apart
    from its agent's cost: the judge model calls stored with purpose 'judge'."""

    config_id: str
    models: tuple[str, ...]
    calls: int
    usage: TokenUsage
    #: None when a served judge call has no cost (unpriced model or unknown usage)
    cost_usd: float | None


def evaluation_costs(store: Store, run_ids: Sequence[str]) -> dict[str, EvaluationCost]:
    """Config id -> its judges' calls, tokens and cost over the runs, summed in SQL; configs
    without judge calls are absent."""
    t, mc = s.trials, s.model_calls
    unpriced = sa.and_(mc.c.status_code == 200, mc.c.cost_usd.is_(None))
    stmt = (sa.select(t.c.config_id, mc.c.model, sa.func.count().label("calls"),
                      *(sa.func.sum(mc.c[c]).label(c) for c in USAGE_COLUMNS.values()),
                      sa.func.sum(mc.c.cost_usd).label("cost_usd"),
                      sa.func.sum(sa.case((unpriced, 1), else_=0)).label("unpriced"))
            .join(t, sa.and_(t.c.run_id == mc.c.run_id, t.c.id == mc.c.trial_id,
                             t.c.try_number == mc.c.try_number))
            .where(mc.c.run_id.in_(list(run_ids)), mc.c.purpose == "judge")
            .group_by(t.c.config_id, mc.c.model).order_by(t.c.config_id, mc.c.model))
    out: dict[str, EvaluationCost] = {}
    with store.engine.connect() as conn:
        for r in conn.execute(stmt).mappings():
            usage = s.usage_from_row(r)
            cost = None if r["unpriced"] else float(r["cost_usd"] or 0.0)
            prev = out.get(r["config_id"])
            if prev is not None:
                usage = prev.usage + usage
                cost = None if cost is None or prev.cost_usd is None else prev.cost_usd + cost
            out[r["config_id"]] = EvaluationCost(
                config_id=r["config_id"], models=(*(prev.models if prev else ()), r["model"]),
                calls=(prev.calls if prev else 0) + int(r["calls"]), usage=usage, cost_usd=cost)
    return out

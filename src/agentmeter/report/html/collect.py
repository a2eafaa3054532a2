"""Everything the report pages show, gathered from the store: the scorecard (load_frame +
score), the config × task cell view behind the per-task table and the distributions, tool-call
frequencies per agent (aggregated in SQL) and which configurations are driven by the scripted
test-double model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import sqlalchemy as sa

from agentmeter.metrics import ScoringSpec, load_frame, prepare, score
from agentmeter.metrics.frame import SCORED, CellMatrix
from agentmeter.metrics.scorecard import Scorecard
from agentmeter.pricing import PriceBook
from agentmeter.records import RunRecord
from agentmeter.store import schema as s
from agentmeter.store.db import Store, StoreError

SCRIPTED_PREFIXES = ("scripted/", "scripted-chat/")
DEFAULT_RESAMPLES = 1000


@dataclass(frozen=True)
class ConfigView:
    id: str
    label: str
    model: str
    agent: str
    scripted: bool


@dataclass(frozen=True)
class ToolUse:
    agent: str
    tool: str
    calls: int
    trials: int  # completed tries of the agent (the per-trial mean's denominator)


@dataclass(frozen=True)
class ReportData:
    run_ids: list[str]
    runs: list[RunRecord]
    card: Scorecard | None
    #: in scorecard row order (== cell matrix row order)
    configs: list[ConfigView]
    task_ids: list[str]
    task_tiers: list[str | None]  # the scoring's tiers (calibrated or stored)
    stored_tiers: list[str | None]
    cells: CellMatrix | None
    tools: list[ToolUse]
    store_where: str
    generated_at: datetime
    spec: ScoringSpec
    problems: list[str] = field(default_factory=list)

    @property
    def scripted_any(self) -> bool:
        return any(c.scripted for c in self.configs)

    def ranked(self) -> list[int]:
        """Config positions by AMS, best first (n/a last): the leaderboard order."""
        if self.card is None:
            return list(range(len(self.configs)))
        rows = self.card.rows
        return sorted(range(len(rows)), key=lambda k: (rows[k].ams is None, -(rows[k].ams or 0.0),
                                                       -rows[k].passes, self.configs[k].label))


def _in(col: Any, values: Sequence[str]) -> Any:
    return col.in_(list(values))


def scripted_configs(store: Store, run_ids: Sequence[str]) -> set[str]:
    """Configs whose model is the scripted one, by name or because a call was served by it."""
    t, mc, c = s.trials, s.model_calls, s.configs
    stmt = (sa.select(t.c.config_id).distinct()
            .join(mc, sa.and_(mc.c.run_id == t.c.run_id, mc.c.trial_id == t.c.id,
                              mc.c.try_number == t.c.try_number))
            .where(_in(t.c.run_id, run_ids), mc.c.scripted.is_(True)))
    named = (sa.select(c.c.id).join(s.run_configs, s.run_configs.c.config_id == c.c.id)
             .where(_in(s.run_configs.c.run_id, run_ids),
                    sa.or_(*(c.c.model_name.startswith(p) for p in SCRIPTED_PREFIXES))))
    with store.engine.connect() as conn:
        return set(conn.execute(stmt).scalars()) | set(conn.execute(named).scalars())


def tool_usage(store: Store, run_ids: Sequence[str]) -> list[ToolUse]:
    """Tool calls per agent and tool name over completed tries, summed in SQL."""
    final = ("passed", "failed", "agent_error", "timeout", "budget_exceeded", "infra_invalid")
    params = {"ids": list(run_ids), "final": list(final)}
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            each, value = ("CROSS JOIN LATERAL json_each_text(t.tool_calls::json) AS j",
                           "j.value::bigint")
        else:
            each, value = ", json_each(t.tool_calls) AS j", "j.value"
        sums = sa.text(
            f"SELECT c.agent_name AS agent, j.key AS tool, SUM({value}) AS calls "
            f"FROM trials AS t JOIN configs AS c ON c.id = t.config_id {each} "
            "WHERE t.run_id IN :ids AND t.status IN :final GROUP BY c.agent_name, j.key"
        ).bindparams(sa.bindparam("ids", expanding=True), sa.bindparam("final", expanding=True))
        counts = sa.text(
            "SELECT c.agent_name AS agent, COUNT(*) AS n FROM trials AS t "
            "JOIN configs AS c ON c.id = t.config_id "
            "WHERE t.run_id IN :ids AND t.status IN :final GROUP BY c.agent_name"
        ).bindparams(sa.bindparam("ids", expanding=True), sa.bindparam("final", expanding=True))
        n_trials = {r.agent: int(r.n) for r in conn.execute(counts, params)}
        rows = list(conn.execute(sums, params))
    return sorted((ToolUse(agent=r.agent, tool=r.tool, calls=int(r.calls or 0),
                           trials=n_trials.get(r.agent, 0)) for r in rows if r.calls),
                  key=lambda u: (u.agent, -u.calls, u.tool))


def collect(store: Store, run_ids: Sequence[str], spec: ScoringSpec | None = None,
            prices: PriceBook | None = None) -> ReportData:
    """Gather a report over one or more runs (raises :class:`StoreError` for unknown runs).
    Trials without a stored cost are priced under ``prices``, by default the built-in price
    table, exactly as ``agentmeter score`` does."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        raise StoreError("report: no run given")
    runs = [store.require_run(rid) for rid in ids]
    spec = spec or ScoringSpec(resamples=DEFAULT_RESAMPLES)
    frame = load_frame(store, ids)
    problems: list[str] = []
    card: Scorecard | None = None
    cells: CellMatrix | None = None
    tiers: list[str | None] = list(frame.task_tiers)
    if not frame.configs or not frame.task_ids:
        problems.append("the run has no configurations or no tasks yet: nothing to score")
    else:
        try:
            book = prices if prices is not None else PriceBook.load([])
            prepared = prepare(frame, spec, prices=book)
            card = score(frame, spec, prices=book)
            cells, tiers = prepared.cells, list(prepared.frame.task_tiers)
        except (ValueError, ZeroDivisionError, IndexError) as e:  # scoring is n/a, not fatal
            problems.append(f"scoring failed: {e}")
    scripted = scripted_configs(store, ids)
    configs = [ConfigView(id=c.id, label=c.label, model=c.model, agent=c.agent,
                          scripted=c.id in scripted) for c in frame.configs]
    return ReportData(run_ids=ids, runs=runs, card=card, configs=configs,
                      task_ids=list(frame.task_ids), task_tiers=tiers,
                      stored_tiers=list(frame.task_tiers), cells=cells,
                      tools=tool_usage(store, ids), store_where=store.where,
                      generated_at=datetime.now(UTC), spec=spec, problems=problems)


@dataclass(frozen=True)
class TrialValues:
    """Selected scored trials (one per config × task cell) of the scoring."""

    config: np.ndarray
    task: np.ndarray
    passed: np.ndarray
    tokens: np.ndarray
    cost: np.ndarray


def scored_cells(data: ReportData) -> TrialValues | None:
    if data.cells is None:
        return None
    cells = data.cells
    ci, ti = np.nonzero(cells.state == SCORED)
    return TrialValues(config=ci, task=ti, passed=cells.passed[ci, ti] == 1,
                       tokens=cells.tokens[ci, ti], cost=cells.cost[ci, ti])

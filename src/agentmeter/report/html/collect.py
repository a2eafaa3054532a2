"""Everything the report pages show, gathered from the store: the scorecard (load_frame +
score), the config × task cell view behind the per-task table and the distributions, tool-call
frequencies per agent and which configurations are driven by the scripted test-double model
(both aggregated in SQL by :mod:`agentmeter.store.queries`), and the AgencyBench metrics when
some try is a scenario step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from agentmeter.metrics import ScoringSpec, load_frame, prepare, score
from agentmeter.metrics.frame import SCORED, CellMatrix
from agentmeter.metrics.from_store import AgencyReport, FunnelReport, agency_report, funnel_report
from agentmeter.metrics.scorecard import Scorecard
from agentmeter.pricing import PriceBook
from agentmeter.records import RunRecord
from agentmeter.report.defaults import DEFAULT_RESAMPLES as DEFAULT_RESAMPLES
from agentmeter.store import queries
from agentmeter.store.db import Store, StoreError
from agentmeter.store.queries import ToolUse


@dataclass(frozen=True)
class ConfigView:
    id: str
    label: str
    model: str
    agent: str
    scripted: bool


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
    #: config id -> what judging its tries cost (evaluation, apart from the agent's cost)
    evaluation: dict[str, queries.EvaluationCost] = field(default_factory=dict)
    #: the AgencyBench metrics, when some try is a scenario step
    agency: AgencyReport | None = None
    #: the CLI-Tool-Bench funnel and its analyses, when some try is a differential test
    funnel: FunnelReport | None = None

    @property
    def scripted_any(self) -> bool:
        return any(c.scripted for c in self.configs)

    def ranked(self) -> list[int]:
        """Config positions in leaderboard order (:meth:`Scorecard.ranked`, by AMS)."""
        if self.card is None:
            return list(range(len(self.configs)))
        return self.card.ranked()


def collect(store: Store, run_ids: Sequence[str], spec: ScoringSpec | None = None,
            prices: PriceBook | None = None) -> ReportData:
    """Gather a report over one or more runs (raises :class:`StoreError` for unknown runs).
    Trials without a stored cost are priced under ``prices``, by default the built-in price
    table, exactly as ``agentmeter score`` does."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        raise StoreError("report: no run given")
    by_id = {r.id: r for r in queries.require_runs(store, ids)}
    runs = [by_id[rid] for rid in ids]
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
    agency: AgencyReport | None = None
    if queries.has_scenario_trials(store, ids):
        try:
            agency = agency_report(queries.selected_trials(store, ids))
        except ValueError as e:  # n/a, not fatal
            problems.append(f"AgencyBench metrics failed: {e}")
    funnel: FunnelReport | None = None
    if queries.has_difftest_trials(store, ids):
        try:
            got = funnel_report(queries.selected_trials(store, ids))
            funnel = got if got.tasks else None
        except ValueError as e:  # n/a, not fatal
            problems.append(f"funnel analyses failed: {e}")
    scripted = queries.scripted_configs(store, ids)
    configs = [ConfigView(id=c.id, label=c.label, model=c.model, agent=c.agent,
                          scripted=c.id in scripted) for c in frame.configs]
    return ReportData(run_ids=ids, runs=runs, card=card, configs=configs,
                      task_ids=list(frame.task_ids), task_tiers=tiers,
                      stored_tiers=list(frame.task_tiers), cells=cells,
                      tools=queries.tool_usage(store, ids), store_where=store.where,
                      generated_at=datetime.now(UTC), spec=spec, problems=problems,
                      evaluation=queries.evaluation_costs(store, ids), agency=agency,
                      funnel=funnel)


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

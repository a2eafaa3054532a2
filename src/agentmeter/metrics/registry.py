"""Metrics by name: what ``agentmeter score --metric NAME`` computes.

A metric is a function from :class:`MetricInputs` (the scored trials as a frame, the full run as
the calibration pool, the scoring options, and the selected trial records on demand) to a
pydantic report, or ``None`` when the runs hold no data for it (then ``--metric all`` leaves it
out). A new metric is one module computing its report plus one line in ``METRICS``; the terminal
view (``report/scorecard_table.py: metric_view``) shows any report, with a table of its own
where one is registered there.

A metric from outside the tree needs no line here: ``--metric package.module:function`` or an
installed package's entry point in group ``agentmeter.metrics`` names a ``Metric`` or a function
from ``MetricInputs`` to a report (its key in ``--json``: the name given). docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, RootModel

from agentmeter import plugins
from agentmeter.metrics.agency import SCENARIO_PASS_RULES
from agentmeter.metrics.allocation import effort_allocation
from agentmeter.metrics.budgets import BudgetSpec
from agentmeter.metrics.from_store import agency_report, funnel_report, has_agency_data
from agentmeter.metrics.passk import PassK, pass_k_by_config
from agentmeter.metrics.scoring import ScoringSpec, prepare, score
from agentmeter.pricing import PriceBook

if TYPE_CHECKING:
    from agentmeter.metrics.frame import TrialFrame
    from agentmeter.store.queries import StoredTrials


class MetricError(ValueError):
    """An option the metric cannot use (the message names it)."""


@dataclass(frozen=True)
class MetricInputs:
    """What every metric may use."""

    #: the trials to score (after ``--subset``)
    frame: TrialFrame
    #: the full run(s): the calibration pool for tiers and budgets
    pool: TrialFrame
    spec: ScoringSpec
    prices: PriceBook
    #: ``--prices`` was given: costs are recomputed from usage under ``prices``
    repriced: bool
    budgets: BudgetSpec | None
    k: int | None
    resamples: int
    #: the selected trial records (named rewards, ``extra``), loaded when a metric asks
    trials: Callable[[], StoredTrials]
    #: the metric was asked for by name, not as part of ``all``
    asked: bool
    #: AgencyBench: how a scenario passes (``mean`` | ``all``; an inference, docs/metrics.md)
    scenario_pass_rule: str = "mean"


class PassKReport(RootModel[list[PassK]]):
    """pass@k and pass^k per configuration."""


Compute = Callable[[MetricInputs], BaseModel | None]


@dataclass(frozen=True)
class Metric:
    #: the key of the report in ``score --json``
    key: str
    compute: Compute


def _ams(m: MetricInputs) -> BaseModel:
    return score(m.frame, m.spec, prices=m.prices, budgets=m.budgets, calibration_frame=m.pool)


def _passk(m: MetricInputs) -> BaseModel:
    k = m.k if m.k is not None else (int(m.frame.attempt.max()) + 1 if len(m.frame) else 1)
    if k < 1:
        raise MetricError("--k must be >= 1")
    return PassKReport(pass_k_by_config(m.frame, k, m.resamples))


def _allocation(m: MetricInputs) -> BaseModel:
    p = prepare(m.frame, m.spec, prices=m.prices, budgets=m.budgets, calibration_frame=m.pool)
    return effort_allocation(p.frame)


def _funnel(m: MetricInputs) -> BaseModel | None:
    report = funnel_report(m.trials(), m.prices if m.repriced else None, m.resamples)
    return report if report.tasks or m.asked else None


def _agency(m: MetricInputs) -> BaseModel | None:
    data = m.trials()
    if not m.asked and not has_agency_data(data):
        return None
    if m.k is not None and m.k < 1:
        raise MetricError("--k must be >= 1")
    rule = m.scenario_pass_rule
    if rule not in SCENARIO_PASS_RULES:
        raise MetricError(f"--scenario-pass {rule!r}: use {' or '.join(SCENARIO_PASS_RULES)}")
    return agency_report(data, sorted({1, 2} | ({m.k} if m.k else set())), m.resamples,
                         "all" if rule == "all" else "mean")


#: every metric, in the order ``--metric all`` shows them
METRICS: dict[str, Metric] = {
    "ams": Metric("scorecard", _ams),
    "passk": Metric("pass_k", _passk),
    "allocation": Metric("allocation", _allocation),
    "funnel": Metric("funnel", _funnel),
    "agency": Metric("agency", _agency),
}


def metric_names() -> list[str]:
    """Built-in metrics, then those installed as entry points (``--metric all`` computes the
    built-in ones)."""
    return [*METRICS, *(n for n in plugins.entry_point_names("metric") if n not in METRICS)]


def plugin_metric(name: str) -> Metric | None:
    """The metric an import path or an installed entry point names (None: neither)."""
    try:
        target = plugins.lookup("metric", name)
    except plugins.PluginError as e:
        raise MetricError(str(e)) from None
    if target is None:
        return None
    if isinstance(target, Metric):
        return target
    if callable(target):
        return Metric(name, target)
    raise MetricError(f"metric {name!r}: {type(target).__name__} object is neither a Metric nor "
                      "a function from MetricInputs to a report")


def compute(names: list[str], inputs_of: Callable[[bool], MetricInputs]
            ) -> dict[str, BaseModel]:
    """The reports of ``names`` (built-in ones in registry order, then plug-ins in the order
    given), keyed by metric name; ``inputs_of(asked)`` gives the inputs, ``asked`` telling
    whether the metric was named rather than part of all."""
    extra: dict[str, Metric] = {}
    for n in names:
        if n not in METRICS and n != "all":
            found = plugin_metric(n)
            if found is None:
                raise MetricError(f"--metric {n!r}: use {', '.join(metric_names())}, all, or "
                                  "package.module:function")
            extra[n] = found
    wanted = list(METRICS) if "all" in names else names
    out: dict[str, BaseModel] = {}
    for name, metric in (*METRICS.items(), *extra.items()):
        if name in wanted:
            try:
                report = metric.compute(inputs_of(name in names))
            except MetricError:
                raise
            except Exception as e:
                if name in METRICS:
                    raise
                raise MetricError(f"metric {name!r}: {type(e).__name__}: {e}") from None
            if report is not None:
                if not isinstance(report, BaseModel):
                    raise MetricError(f"metric {name!r}: returned {type(report).__name__}, not "
                                      "a pydantic report")
                out[name] = report
    return out

"""Weighted per-configuration statistics over tasks: the one code path for point estimates
(every task weight 1) and bootstrap replicates (multinomial task counts per stratum).

A :class:`ScoringPlan` fixes what a scoring needs besides the cells: which tasks form each tier,
the tier's budget grid and threshold, α and the infra_invalid policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmeter.metrics.ams import (
    InfraPolicy,
    TierFiguresArrays,
    TierInputs,
    combine,
    contributions,
)
from agentmeter.metrics.choices import PerPassSpend
from agentmeter.metrics.frame import (
    INFRA,
    MISSING,
    SCORED,
    TIERS,
    CellMatrix,
    FloatArray,
    IntArray,
    Tier,
)


@dataclass(frozen=True)
class TierPlan:
    tier: Tier
    tasks: IntArray  # task indices (columns of the cell matrix)
    budgets: list[float] | None  # None: no grid -> CostAUBQC n/a
    tau: float | None  # None: no threshold -> no run counts as an expensive failure


@dataclass(frozen=True)
class ScoringPlan:
    tiers: tuple[TierPlan, TierPlan, TierPlan]
    alpha: float
    infra: InfraPolicy
    #: Tok./Pass and USD/Pass numerators: every try of every attempt, or the selected attempt's
    spend: PerPassSpend = "all"


@dataclass(frozen=True)
class Statistics:
    """Per (replicate, config) figures; NaN = n/a."""

    tiers: dict[str, TierFiguresArrays]
    ams: FloatArray
    passes: FloatArray
    n_tasks: FloatArray
    spend_usd: FloatArray
    spend_tokens: FloatArray
    #: 1 where some trial's spend is unknown (per-pass figures are then n/a)
    unknown_usd: FloatArray
    unknown_tokens: FloatArray

    @property
    def pass_rate(self) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.n_tasks > 0, self.passes / self.n_tasks, np.nan)

    def per_pass(self, which: str) -> FloatArray:
        total = self.spend_usd if which == "usd" else self.spend_tokens
        unknown = self.unknown_usd if which == "usd" else self.unknown_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((self.passes > 0) & (unknown == 0), total / self.passes, np.nan)


def _weighted_sum(weights: FloatArray, values: FloatArray) -> FloatArray:
    """Σ_t w[b, t]·v[c, t, ...] -> [b, c, ...]."""
    return np.tensordot(weights, values, axes=([1], [1]))


def tier_inputs(cells: CellMatrix, tasks: IntArray) -> TierInputs:
    return TierInputs(state=cells.state[:, tasks], reward=cells.reward[:, tasks],
                      passed=cells.passed[:, tasks], cost=cells.cost[:, tasks])


def statistics(cells: CellMatrix, plan: ScoringPlan, weights: FloatArray) -> Statistics:
    """All figures for task weights ``weights`` of shape (replicates, tasks)."""
    tiers: dict[str, TierFiguresArrays] = {}
    for tp in plan.tiers:
        budgets = tp.budgets or []
        contrib = contributions(tier_inputs(cells, tp.tasks), budgets,
                                tp.tau, plan.infra)
        sums = _weighted_sum(weights[:, tp.tasks], contrib)
        fig = combine(sums, plan.alpha)
        if tp.budgets is None or len(tp.tasks) == 0:
            nan = np.full(fig.sr.shape, np.nan)
            fig = TierFiguresArrays(sr=fig.sr if len(tp.tasks) else nan, cbq=fig.cbq,
                                    cost_aubqc=nan, efr=nan if len(tp.tasks) == 0 else fig.efr,
                                    score=nan, n_counted=fig.n_counted)
        tiers[tp.tier] = fig
    ams = np.stack([tiers[g].score for g in TIERS], axis=-1).mean(axis=-1)
    scored = cells.state == SCORED
    present = cells.state != MISSING
    spend_usd, spend_tok = ((cells.spend_usd, cells.spend_tokens) if plan.spend == "all"
                            else (cells.attempt_spend_usd, cells.attempt_spend_tokens))
    per_task = np.stack([
        np.where(scored, cells.passed, 0.0),
        np.ones(cells.state.shape),
        np.where(present, np.nan_to_num(spend_usd, nan=0.0), 0.0),
        np.where(present, np.nan_to_num(spend_tok, nan=0.0), 0.0),
        (present & np.isnan(spend_usd)).astype(np.float64),
        (present & np.isnan(spend_tok)).astype(np.float64),
    ], axis=-1)
    s = _weighted_sum(weights, per_task)
    return Statistics(tiers=tiers, ams=ams, passes=s[..., 0], n_tasks=s[..., 1],
                      spend_usd=s[..., 2], spend_tokens=s[..., 3], unknown_usd=s[..., 4],
                      unknown_tokens=s[..., 5])


def counts(cells: CellMatrix) -> dict[str, IntArray]:
    """Per config: scored / infra_invalid / missing cell counts."""
    return {"scored": (cells.state == SCORED).sum(axis=1),
            "infra_invalid": (cells.state == INFRA).sum(axis=1),
            "missing": (cells.state == MISSING).sum(axis=1)}

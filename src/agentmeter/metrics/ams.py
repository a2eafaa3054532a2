"""AgentMeter Score (§4.2–4.3, Eqs. 3–8) on config × task cell matrices.

For tier g with task set T_g, budget grid B_g and threshold τ_g, per configuration c:

    CBQ_g(c, b)     = 1/|T_g| Σ_i R_i·1[C_i ≤ b]                       (3)
    CostAUBQC_g(c)  = 1/|B_g| Σ_b CBQ_g(c, b)                           (4)
    EFR_g(c)        = 1/|T_g| Σ_i 1[y_i = 0 ∧ C_i > τ_g]                (5)
    SR_g(c)         = 1/|T_g| Σ_i R_i                                   (6)
    TierScore_g(c)  = [α·SR_g + (1 − α)·CostAUBQC_g]·(1 − EFR_g)        (7)
    AMS(c)          = 1/3 Σ_g TierScore_g(c)                            (8)

Missing trials (never run) count in |T_g| and contribute zero (Eq. 4's note: "Missing,
task-invalid, failed, and over-budget trials contribute zero at that budget point"). An
infra_invalid selected trial is read the same way by default (``infra_invalid="zero"``: it
stays in |T_g| and contributes zero); ``infra_invalid="exclude"`` takes it out of the
denominator instead (§3.5: such attempts are "excluded from model–CLI conclusions when they
are not attributable to the configuration"). docs/metrics.md quotes both.

Everything is computed from per-task *contributions* summed over tasks, so the bootstrap
(:mod:`agentmeter.metrics.uncertainty`) only has to re-weight tasks. Figures that cannot be
computed are NaN here (None in the scorecard): a tier without tasks, a configuration with no
counted trial in a tier, a scored trial whose cost is unknown (cost-aware parts only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmeter.metrics.choices import INFRA_POLICIES as INFRA_POLICIES
from agentmeter.metrics.choices import InfraPolicy as InfraPolicy
from agentmeter.metrics.frame import INFRA, MISSING, SCORED, CodeArray, FloatArray

DEFAULT_ALPHA = 0.6


@dataclass(frozen=True)
class TierInputs:
    """The cells of one tier: arrays of shape (configs, tasks of the tier)."""

    state: CodeArray
    reward: FloatArray
    passed: FloatArray
    cost: FloatArray


def contributions(cells: TierInputs, budgets: list[float], tau: float | None,
                  infra: InfraPolicy = "zero") -> FloatArray:
    """Per-task contributions, shape (configs, tasks, 4 + |B|):
    [R, 1[y=0 ∧ C>τ], counted, unknown cost, R·1[C≤b] for b in B]."""
    scored = cells.state == SCORED
    counted = scored | (cells.state == MISSING) | ((cells.state == INFRA) & (infra == "zero"))
    r = np.where(scored, cells.reward, 0.0)
    cost = cells.cost
    unknown = scored & np.isnan(cost)
    expensive = (scored & (cells.passed == 0) & (cost > tau) if tau is not None
                 else np.zeros(cost.shape, dtype=np.bool_))
    with np.errstate(invalid="ignore"):
        within = [r * (cost <= b) for b in budgets]
    return np.stack([r, expensive.astype(np.float64), counted.astype(np.float64),
                     unknown.astype(np.float64), *within], axis=-1)


@dataclass(frozen=True)
class TierFiguresArrays:
    """Per-config tier figures; NaN = n/a. ``cbq`` has shape (..., |B|)."""

    sr: FloatArray
    cbq: FloatArray
    cost_aubqc: FloatArray
    efr: FloatArray
    score: FloatArray
    n_counted: FloatArray


def combine(sums: FloatArray, alpha: float = DEFAULT_ALPHA) -> TierFiguresArrays:
    """Eqs. 3–7 from contributions summed over the tier's tasks (last axis = contribution)."""
    s_r, s_e, d, unk = sums[..., 0], sums[..., 1], sums[..., 2], sums[..., 3]
    s_b = sums[..., 4:]
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = d > 0
        sr = np.where(ok, s_r / d, np.nan)
        cost_ok = ok & (unk == 0)
        cbq = np.where(cost_ok[..., None], s_b / d[..., None], np.nan)
        aubqc = cbq.mean(axis=-1) if s_b.shape[-1] else np.full(sr.shape, np.nan)
        efr = np.where(cost_ok, s_e / d, np.nan)
    score = (alpha * sr + (1.0 - alpha) * aubqc) * (1.0 - efr)
    return TierFiguresArrays(sr=sr, cbq=cbq, cost_aubqc=aubqc, efr=efr, score=score,
                             n_counted=d)


def ams(tier_scores: FloatArray) -> FloatArray:
    """Eq. 8: the mean of the three tier scores (last axis); NaN if any is n/a."""
    return np.asarray(np.asarray(tier_scores, dtype=np.float64).mean(axis=-1))


# --- scalar forms (one configuration, plain lists) -------------------------------------------


def cbq(rewards: list[float], costs: list[float], budget: float) -> float:
    """Eq. 3 for one configuration over the tier's tasks (missing tasks as R = 0)."""
    return sum(r for r, c in zip(rewards, costs, strict=True) if c <= budget) / len(rewards)


def cost_aubqc(rewards: list[float], costs: list[float], budgets: list[float]) -> float:
    """Eq. 4."""
    return sum(cbq(rewards, costs, b) for b in budgets) / len(budgets)


def efr(passed: list[bool], costs: list[float], tau: float) -> float:
    """Eq. 5."""
    return sum(1 for y, c in zip(passed, costs, strict=True) if not y and c > tau) / len(passed)


def tier_score(sr: float, aubqc: float, efr_value: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Eq. 7."""
    return (alpha * sr + (1 - alpha) * aubqc) * (1 - efr_value)

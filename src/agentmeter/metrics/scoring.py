"""Score a frame: the AgentMeter pipeline end to end, producing a :class:`Scorecard`.

1. billable cost per trial (stored, or Eq. 2 under a price book; ``reprice`` forces Eq. 2);
2. tiers: Eq. 1 calibration over a calibration pool (default: the scored frame itself), a
   given :class:`Calibration`, or the tiers stored with the tasks;
3. budget grids and thresholds: a :class:`BudgetSpec` (e.g. Table 1) or derived from the
   calibration pool's costs (rounded quantiles; τ_g = P90 of failed runs);
4. Eqs. 3–8 per configuration, diagnostics, optional bootstrap intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from agentmeter.metrics.aggregate import ScoringPlan, Statistics, TierPlan, counts, statistics
from agentmeter.metrics.ams import DEFAULT_ALPHA, InfraPolicy
from agentmeter.metrics.budgets import (
    DEFAULT_QUANTILES,
    BudgetSpec,
    DuplicateBudgets,
    derive_budgets,
    rounding_notes,
)
from agentmeter.metrics.choices import BudgetRounding, PerPassSpend
from agentmeter.metrics.cost import resolve_costs
from agentmeter.metrics.diagnostics import delta_best, model_summaries, winners
from agentmeter.metrics.effort import Calibration, calibrate
from agentmeter.metrics.frame import (
    MISSING,
    SCORED,
    TIERS,
    CellMatrix,
    FloatArray,
    Tier,
    TrialFrame,
    cell_matrix,
    tier_index,
)
from agentmeter.metrics.scorecard import (
    BootstrapInfo,
    ConfigRow,
    Interval,
    RepeatedReads,
    Scorecard,
    TierFigures,
    TierSetup,
)
from agentmeter.metrics.uncertainty import AttemptCells, bootstrap, percentile_interval
from agentmeter.pricing import PriceBook


class ScoringSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alpha: float | None = Field(default=None, ge=0, le=1,
                                description="None: the budget file's alpha, else 0.6")
    infra_invalid: InfraPolicy = Field(
        default="zero", validation_alias=AliasChoices("infra_invalid", "infra"),
        description="an infra_invalid selected trial in Eqs. 3-6: zero (the paper: it "
        "contributes zero, |T_g| unchanged) or exclude (it leaves the denominator)")
    tiers: Literal["calibrate", "stored"] = "calibrate"
    budget_quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    budget_decimals: int = 2
    budget_rounding: BudgetRounding = Field(
        default="cents", description="derived grids and τ: rounded to budget_decimals places "
        "(the paper's 'rounded tier-specific cost quantiles', Table 1 in cents) or unrounded")
    duplicate_budgets: DuplicateBudgets = Field(
        default="keep", description="derived grids: keep one point per quantile even when "
        "rounded points coincide (the paper's five), or merge them")
    per_pass_spend: PerPassSpend = Field(
        default="all", description="Tok./Pass and USD/Pass numerators: every completed try of "
        "every attempt (the paper's §3.5) or the selected attempt's tries per (config, task)")
    reprice: bool = False
    resamples: int = Field(default=0, ge=0, description="bootstrap resamples; 0 = no CIs")
    ci_level: float = Field(default=0.95, gt=0, lt=1)
    seed: int = 0


def _opt(x: float | np.floating | None) -> float | None:
    if x is None:
        return None
    v = float(x)
    return None if math.isnan(v) else v


def _tiered_cost_pools(frame: TrialFrame) -> tuple[dict[Tier, FloatArray], dict[Tier, FloatArray]]:
    """Costs of scored selected trials per tier, and of the failed ones among them."""
    cells = cell_matrix(frame)
    tidx = tier_index(frame)
    costs: dict[Tier, FloatArray] = {}
    failed: dict[Tier, FloatArray] = {}
    for gi, g in enumerate(TIERS):
        cols = tidx == gi
        scored = cells.state[:, cols] == SCORED
        c = cells.cost[:, cols]
        costs[g] = c[scored]
        failed[g] = c[scored & (cells.passed[:, cols] == 0)]
    return costs, failed


def _tiers_for(frame: TrialFrame, spec: ScoringSpec, calibration: Calibration | None,
               calibration_frame: TrialFrame | None, notes: list[str]
               ) -> tuple[TrialFrame, TrialFrame, str]:
    """(scoring frame with tiers, calibration pool with tiers, tier source)."""
    pool = calibration_frame if calibration_frame is not None else frame
    if spec.tiers == "stored" and calibration is None:
        untiered = sum(t is None for t in frame.task_tiers)
        if untiered:
            notes.append(f"{untiered} task(s) have no stored tier and are left out of the "
                         "tier scores")
        return frame, pool, "stored"
    if calibration is None:
        calibration = calibrate(pool)
        notes.extend(f"calibration: {n}" for n in calibration.notes)
    tiers = calibration.tiers
    outside = sorted(t for t in frame.task_ids if t not in tiers)
    if outside:
        notes.append(f"{len(outside)} task(s) are not in the calibration and are left out of "
                     "the tier scores: " + ", ".join(outside[:10]))
    return frame.with_tiers(dict(tiers)), pool.with_tiers(dict(tiers)), "calibration"


@dataclass(frozen=True)
class Prepared:
    """Everything a scoring needs, after costs, tiers and budgets are fixed."""

    frame: TrialFrame
    cells: CellMatrix
    plan: ScoringPlan
    setups: list[TierSetup]
    tier_source: str
    budget_source: str
    notes: list[str]


def prepare(frame: TrialFrame, spec: ScoringSpec | None = None, *,
            prices: PriceBook | None = None, budgets: BudgetSpec | None = None,
            calibration: Calibration | None = None,
            calibration_frame: TrialFrame | None = None) -> Prepared:
    spec = spec or ScoringSpec()
    notes: list[str] = list(frame.notes)
    resolved = resolve_costs(frame, prices, reprice=spec.reprice)
    notes.extend(resolved.notes)
    frame = frame.with_costs(resolved.cost_usd)
    if calibration_frame is not None:
        calibration_frame = calibration_frame.with_costs(
            resolve_costs(calibration_frame, prices, reprice=spec.reprice).cost_usd)
    frame, pool, tier_source = _tiers_for(frame, spec, calibration, calibration_frame, notes)
    if budgets is None:
        costs, failed = _tiered_cost_pools(pool)
        decimals = spec.budget_decimals if spec.budget_rounding == "cents" else None
        budgets = derive_budgets(costs, failed, spec.budget_quantiles, decimals,
                                 duplicates=spec.duplicate_budgets)
        if decimals is not None:
            notes.extend(rounding_notes(costs, failed, spec.budget_quantiles, decimals))
        budget_source = "calibration quantiles" + (" (unrounded)" if decimals is None else "")
    else:
        budget_source = budgets.source or "given"
    alpha = spec.alpha if spec.alpha is not None else (budgets.alpha or DEFAULT_ALPHA)
    tidx = tier_index(frame)
    tier_plans = []
    setups = []
    for gi, g in enumerate(TIERS):
        tasks = np.flatnonzero(tidx == gi)
        tb = budgets.tiers.get(g)
        if len(tasks) == 0:
            notes.append(f"tier {g} has no tasks: its score and AMS are n/a")
        elif tb is None:
            notes.append(f"tier {g} has no budget grid (no priced run): CostAUBQC, its tier "
                         "score and AMS are n/a")
        elif tb.tau is None:
            notes.append(f"tier {g}: no failed run to derive τ from; no run counts as an "
                         "expensive failure (EFR = 0)")
        tier_plans.append(TierPlan(g, tasks, tb.budgets if tb else None,
                                   tb.tau if tb else None))
        setups.append(TierSetup(tier=g, n_tasks=len(tasks), budgets=tb.budgets if tb else None,
                                tau=tb.tau if tb else None))
    plan = ScoringPlan(tiers=(tier_plans[0], tier_plans[1], tier_plans[2]), alpha=alpha,
                       infra=spec.infra_invalid, spend=spec.per_pass_spend)
    if spec.per_pass_spend == "selected":
        notes.append("Tok./Pass and USD/Pass count the selected attempt's spending only (its "
                     "tries, one attempt per configuration and task; --per-pass-spend all is "
                     "the paper's every-attempt reading)")
    return Prepared(frame, cell_matrix(frame), plan, setups, tier_source, budget_source, notes)


def score(frame: TrialFrame, spec: ScoringSpec | None = None, *,
          prices: PriceBook | None = None, budgets: BudgetSpec | None = None,
          calibration: Calibration | None = None,
          calibration_frame: TrialFrame | None = None) -> Scorecard:
    """Score every configuration of ``frame`` (see the module docstring)."""
    spec = spec or ScoringSpec()
    p = prepare(frame, spec, prices=prices, budgets=budgets, calibration=calibration,
                calibration_frame=calibration_frame)
    frame, cells, plan, notes = p.frame, p.cells, p.plan, p.notes
    stats = statistics(cells, plan, np.ones((1, len(frame.task_ids))))
    cis: dict[str, tuple[FloatArray, FloatArray]] = {}
    boot_info = None
    if spec.resamples:
        attempts = AttemptCells.from_frame(frame)
        reps = bootstrap(cells, plan, tier_index(frame), spec.resamples, spec.seed, attempts)
        cis = {name: percentile_interval(v, spec.ci_level) for name, v in reps.items()}
        boot_info = BootstrapInfo(resamples=spec.resamples, level=spec.ci_level, seed=spec.seed,
                                  over_attempts=attempts is not None)
    rows = _rows(frame, cells, stats, plan, cis)
    if any(r.n_infra_invalid for r in rows):
        notes.append("infra_invalid selected trials "
                     + ("are excluded from the tier denominators (--infra-invalid exclude)"
                        if spec.infra_invalid == "exclude"
                        else "contribute zero in Eqs. 3-6 (the paper's reading; "
                        "--infra-invalid exclude leaves them out of the denominators)")
                     + "; their spending stays in Tok/Pass and USD/Pass")
    return Scorecard(rows=rows, models=model_summaries(rows), winners=winners(rows),
                     tiers=p.setups, alpha=plan.alpha, infra_policy=spec.infra_invalid,
                     tier_source=p.tier_source, budget_source=p.budget_source,
                     n_tasks=len(frame.task_ids), bootstrap=boot_info, notes=notes)


def repeated_reads(cells: CellMatrix, c: int) -> RepeatedReads | None:
    """The repeated-read summary of configuration ``c``'s selected trials (None: none)."""
    present = cells.state[c] != MISSING
    if not present.any():
        return None
    values = cells.repeated_reads[c][present]
    known = values[~np.isnan(values)]
    return RepeatedReads(trajectories=int(known.size), not_recorded=int((np.isnan(values)).sum()),
                         total=int(known.sum()), mean=float(known.mean()) if known.size else None,
                         max=int(known.max()) if known.size else None,
                         with_repeats=int((known > 0).sum()))


def _rows(frame: TrialFrame, cells: CellMatrix, stats: Statistics, plan: ScoringPlan,
          cis: dict[str, tuple[FloatArray, FloatArray]]) -> list[ConfigRow]:
    n = counts(cells)
    scored = cells.state == SCORED
    ams_values = [_opt(stats.ams[0, c]) if n["scored"][c] else None
                  for c in range(len(frame.configs))]
    gaps = delta_best(ams_values, [c.model for c in frame.configs])
    per_pass_tok, per_pass_usd = stats.per_pass("tokens"), stats.per_pass("usd")
    rows = []
    for c, info in enumerate(frame.configs):
        has_any = bool(n["scored"][c])
        tiers: dict[Tier, TierFigures] = {}
        for tp in plan.tiers:
            fig = stats.tiers[tp.tier]
            g: Tier = tp.tier
            tiers[g] = TierFigures(
                tier=g, n_tasks=len(tp.tasks), n_counted=int(fig.n_counted[0, c]),
                passes=int((scored[c, tp.tasks] & (cells.passed[c, tp.tasks] == 1)).sum()),
                sr=_opt(fig.sr[0, c]) if has_any else None,
                cbq=[_opt(v) if has_any else None for v in fig.cbq[0, c]],
                cost_aubqc=_opt(fig.cost_aubqc[0, c]) if has_any else None,
                efr=_opt(fig.efr[0, c]) if has_any else None,
                score=_opt(fig.score[0, c]) if has_any else None)
        unknown_tok = bool(stats.unknown_tokens[0, c])
        unknown_usd = bool(stats.unknown_usd[0, c])
        ci = {}
        for name, (lo, hi) in cis.items():
            if has_any and not (np.isnan(lo[c]) or np.isnan(hi[c])):
                ci[name] = Interval(low=float(lo[c]), high=float(hi[c]))
        rows.append(ConfigRow(
            config_id=info.id, label=info.label, model=info.model, agent=info.agent,
            n_tasks=len(frame.task_ids), n_scored=int(n["scored"][c]),
            n_infra_invalid=int(n["infra_invalid"][c]), n_missing=int(n["missing"][c]),
            passes=int(stats.passes[0, c]),
            pass_rate=_opt(stats.pass_rate[0, c]) if has_any else None,
            tiers=tiers,
            tokens=None if unknown_tok else float(stats.spend_tokens[0, c]),
            usd=None if unknown_usd else float(stats.spend_usd[0, c]),
            tok_per_pass=_opt(per_pass_tok[0, c]), usd_per_pass=_opt(per_pass_usd[0, c]),
            ams=ams_values[c], delta_best=gaps[c], ci=ci,
            repeated_reads=repeated_reads(cells, c)))
    return rows

"""Budget grids B_g and expensive-failure thresholds τ_g (AgentMeter §4.2, Table 1).

Either fixed (a TOML file; the paper's Table 1 ships as ``agentmeter-table1.toml``) or derived
from a calibration pool: B_g = rounded tier-specific cost quantiles, τ_g = P90 cost among the
failed (scored, not passed) runs of tier g, rounded the same way.

```toml
alpha = 0.6                       # optional: the TierScore trade-off
[tiers.easy]
budgets = [0.01, 0.04, 0.10, 0.18, 0.26]
tau = 0.12
```
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentmeter.metrics.choices import DUPLICATE_BUDGETS as DUPLICATE_BUDGETS
from agentmeter.metrics.choices import DuplicateBudgets as DuplicateBudgets
from agentmeter.metrics.frame import TIERS, FloatArray, Tier
from agentmeter.tomlfile import read_toml, validate_toml

SHIPPED_DIR = Path(__file__).parent
TABLE1_PATH = SHIPPED_DIR / "agentmeter-table1.toml"

#: the cost quantiles the derived budget grids use (five points, like Table 1)
DEFAULT_QUANTILES: tuple[float, ...] = (0.10, 0.25, 0.50, 0.75, 0.90)
FAILED_QUANTILE = 0.90


class BudgetError(ValueError):
    pass


class TierBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budgets: list[float] = Field(min_length=1, description="B_g in USD")
    tau: float | None = Field(default=None, ge=0,
                              description="τ_g in USD; None = no failed run to derive it from")

    @field_validator("budgets")
    @classmethod
    def _non_negative_sorted(cls, v: list[float]) -> list[float]:
        if any((not math.isfinite(b)) or b < 0 for b in v):
            raise ValueError("budgets must be finite and >= 0")
        return sorted(v)


class BudgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tiers: dict[Tier, TierBudget]
    alpha: float | None = Field(default=None, ge=0, le=1)
    source: str | None = None

    @classmethod
    def load(cls, path: Path) -> BudgetSpec:
        data = read_toml(path, BudgetError)
        return validate_toml(cls, {**data, "source": str(path)}, path, BudgetError)


def table1() -> BudgetSpec:
    """The paper's Table 1 (USD, pricing snapshot 2026-06-04)."""
    return BudgetSpec.load(TABLE1_PATH)


def round_budget(value: float, decimals: int | None = 2) -> float:
    """Round to ``decimals`` places (cents, like Table 1); a positive value that would round to
    zero keeps two significant figures instead, so cheap tiers still get a usable grid.
    ``decimals=None`` (``--budget-rounding none``): the value unrounded."""
    if decimals is None:
        return float(value)
    rounded = round(value, decimals)
    if rounded == 0 and value > 0:
        return float(f"{value:.2g}")
    return float(rounded)


def derive_tier_budget(costs: FloatArray, failed_costs: FloatArray,
                       quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
                       decimals: int | None = 2, duplicates: DuplicateBudgets = "keep"
                       ) -> TierBudget | None:
    """B_g from the tier's run costs and τ_g from its failed runs' costs (NaN = unknown, skipped).
    ``None`` when the tier has no priced run.

    The grid has one point per quantile, always (five by default, like Table 1), even when
    rounded quantiles coincide: Eq. 4 averages over the grid's points, and "We set each budget
    grid to rounded tier-specific cost quantiles" makes each quantile a point. ``duplicates=
    "merge"`` is the other reading (equal rounded points counted once)."""
    known = costs[~np.isnan(costs)]
    if known.size == 0:
        return None
    points = [round_budget(float(q), decimals) for q in np.quantile(known, quantiles)]
    grid = sorted(set(points)) if duplicates == "merge" else sorted(points)
    failed = failed_costs[~np.isnan(failed_costs)]
    tau = (round_budget(float(np.quantile(failed, FAILED_QUANTILE)), decimals)
           if failed.size else None)
    return TierBudget(budgets=grid, tau=tau)


def derive_budgets(costs_by_tier: dict[Tier, FloatArray],
                   failed_by_tier: dict[Tier, FloatArray],
                   quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
                   decimals: int | None = 2, source: str = "calibration",
                   duplicates: DuplicateBudgets = "keep") -> BudgetSpec:
    tiers: dict[Tier, TierBudget] = {}
    for g in TIERS:
        tb = derive_tier_budget(costs_by_tier.get(g, np.zeros(0)),
                                failed_by_tier.get(g, np.zeros(0)), quantiles, decimals,
                                duplicates)
        if tb is not None:
            tiers[g] = tb
    return BudgetSpec(tiers=tiers, source=source)


def rounding_notes(costs_by_tier: dict[Tier, FloatArray], failed_by_tier: dict[Tier, FloatArray],
                   quantiles: tuple[float, ...] = DEFAULT_QUANTILES, decimals: int = 2
                   ) -> list[str]:
    """What rounding to ``decimals`` places does to the derived grids and τ (docs/metrics.md,
    "Budget rounding"): distinct quantiles that become one point, and positive values that would
    round to 0 (kept at two significant figures instead). Empty when rounding changes neither."""
    notes = []
    for g in TIERS:
        costs = costs_by_tier.get(g, np.zeros(0))
        known = costs[~np.isnan(costs)]
        if known.size == 0:
            continue
        raw = [float(q) for q in np.quantile(known, quantiles)]
        failed = failed_by_tier.get(g, np.zeros(0))
        failed = failed[~np.isnan(failed)]
        tau = [float(np.quantile(failed, FAILED_QUANTILE))] if failed.size else []
        rounded = [round_budget(v, decimals) for v in raw]
        if len(set(rounded)) < len(set(raw)):
            notes.append(f"tier {g}: rounding the budget grid to {decimals} decimals merges "
                         f"points ({', '.join(f'{v:.4g}' for v in raw)} -> "
                         f"{', '.join(f'{v:g}' for v in rounded)}); --budget-rounding none "
                         "keeps them apart")
        zeroed = [v for v in raw + tau if v > 0 and round(v, decimals) == 0]
        if zeroed:
            notes.append(f"tier {g}: {len(zeroed)} budget value(s) would round to 0 at "
                         f"{decimals} decimals ({', '.join(f'{v:.4g}' for v in zeroed)}): kept "
                         "at two significant figures instead")
    return notes

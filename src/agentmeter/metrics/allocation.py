"""Trajectory effort allocation (AgentMeter §5.5, Table 5): how tokens and billable cost split
between passed and failed runs, overall and per tier. Descriptive; not an AMS component.
Uses the selected, scored trials (infra_invalid excluded)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from agentmeter.metrics.frame import (
    SCORED,
    TIERS,
    FloatArray,
    Tier,
    TrialFrame,
    cell_matrix,
    tier_index,
)


class EffortStats(BaseModel):
    n: int
    median_tokens: float | None
    mean_tokens: float | None
    median_usd: float | None
    mean_usd: float | None


class PassFailSplit(BaseModel):
    passed: EffortStats
    failed: EffortStats


class EffortAllocation(BaseModel):
    overall: PassFailSplit
    tiers: dict[Tier, PassFailSplit]


def _stats(tokens: FloatArray, usd: FloatArray) -> EffortStats:
    def agg(v: FloatArray, f: str) -> float | None:
        v = v[~np.isnan(v)]
        if v.size == 0:
            return None
        return float(np.median(v) if f == "median" else v.mean())

    return EffortStats(n=len(tokens), median_tokens=agg(tokens, "median"),
                       mean_tokens=agg(tokens, "mean"), median_usd=agg(usd, "median"),
                       mean_usd=agg(usd, "mean"))


def _split(tokens: FloatArray, usd: FloatArray, passed: FloatArray) -> PassFailSplit:
    ok = passed == 1
    return PassFailSplit(passed=_stats(tokens[ok], usd[ok]), failed=_stats(tokens[~ok], usd[~ok]))


def effort_allocation(frame: TrialFrame) -> EffortAllocation:
    cells = cell_matrix(frame)
    scored = cells.state == SCORED
    tidx = tier_index(frame)
    overall = _split(cells.tokens[scored], cells.cost[scored], cells.passed[scored])
    tiers = {}
    for gi, g in enumerate(TIERS):
        m = scored & (tidx == gi)[None, :]
        tiers[g] = _split(cells.tokens[m], cells.cost[m], cells.passed[m])
    return EffortAllocation(overall=overall, tiers=tiers)

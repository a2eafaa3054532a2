"""Bootstrap confidence intervals over tasks (and attempts), vectorised and seeded.

Tasks are resampled with replacement *within their tier* (the tier sizes stay fixed, so every
replicate is a valid AgentMeter scoring); a replicate is a row of multinomial task counts and all
figures are weighted sums (:func:`agentmeter.metrics.aggregate.statistics`). When cells have
several attempts, each replicate also draws one available attempt per (config, task) uniformly,
so the interval reflects run-to-run variability too (the point estimate keeps the latest-attempt
selection rule). Intervals are percentile intervals.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from agentmeter.metrics.aggregate import ScoringPlan, Statistics, statistics
from agentmeter.metrics.frame import (
    MISSING,
    ROW_COLUMNS,
    TIERS,
    BoolArray,
    CellMatrix,
    FloatArray,
    IntArray,
    TrialFrame,
    cell_matrix,
)
from agentmeter.metrics.scorecard import Interval

#: headline figures that get intervals
HEADLINE = ("ams", "pass_rate", "tok_per_pass", "usd_per_pass", *(f"score_{g}" for g in TIERS))


def task_weights(strata: IntArray, resamples: int, rng: np.random.Generator) -> FloatArray:
    """Counts of each task in ``resamples`` stratified bootstrap samples: (resamples, tasks)."""
    n = len(strata)
    w = np.zeros((resamples, n))
    for s in np.unique(strata):
        members = np.flatnonzero(strata == s)
        k = len(members)
        draws = rng.integers(0, k, size=(resamples, k))
        offsets = (np.arange(resamples)[:, None] * k + draws).ravel()
        w[:, members] = np.bincount(offsets, minlength=resamples * k).reshape(resamples, k)
    return w


def headline(stats: Statistics) -> dict[str, FloatArray]:
    out = {"ams": stats.ams, "pass_rate": stats.pass_rate,
           "tok_per_pass": stats.per_pass("tokens"), "usd_per_pass": stats.per_pass("usd")}
    for g in TIERS:
        out[f"score_{g}"] = stats.tiers[g].score
    return out


def percentile_interval(replicates: FloatArray, level: float) -> tuple[FloatArray, FloatArray]:
    """Per column of (replicates, configs): the central ``level`` interval, NaN-skipping; NaN
    where more than 5 % of replicates are n/a."""
    tail = (1 - level) / 2 * 100
    finite = ~np.isnan(replicates)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns -> NaN
        lo, hi = np.nanpercentile(replicates, [tail, 100 - tail], axis=0)
    bad = finite.mean(axis=0) < 0.95
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


@dataclass(frozen=True)
class AttemptCells:
    """Per-attempt cell matrices stacked on a leading axis (attempts, configs, tasks), and the
    cells' spending over every attempt (what Tok/Pass and USD/Pass divide, whichever attempt a
    replicate draws for quality)."""

    cells: list[CellMatrix]
    spend_usd: FloatArray
    spend_tokens: FloatArray

    @classmethod
    def from_frame(cls, frame: TrialFrame) -> AttemptCells | None:
        attempts = np.unique(frame.attempt)
        if len(attempts) <= 1:
            return None
        every = cell_matrix(frame)
        return cls([cell_matrix(_rows(frame, frame.attempt == a)) for a in attempts],
                   every.spend_usd, every.spend_tokens)

    def draw(self, rng: np.random.Generator) -> CellMatrix:
        """One available attempt per (config, task), uniformly."""
        state = np.stack([c.state for c in self.cells])
        avail = state != MISSING
        n_avail = avail.sum(axis=0)
        u = rng.random(n_avail.shape)
        k = np.floor(u * np.maximum(n_avail, 1)).astype(np.int64)  # k-th available attempt
        rank = np.cumsum(avail, axis=0) - 1
        pick = np.argmax(avail & (rank == k[None]), axis=0)[None]
        fields = {}
        for name in ("state", "reward", "passed", "cost", "tokens", "turns", "interactions",
                     "attempt", "repeated_reads", "attempt_spend_usd", "attempt_spend_tokens"):
            stacked = np.stack([getattr(c, name) for c in self.cells])
            fields[name] = np.take_along_axis(stacked, pick, axis=0)[0]
        return CellMatrix(spend_usd=self.spend_usd, spend_tokens=self.spend_tokens, **fields)


def _rows(frame: TrialFrame, keep: BoolArray) -> TrialFrame:
    return replace(frame, **{name: getattr(frame, name)[keep] for name in ROW_COLUMNS})


def bootstrap(cells: CellMatrix, plan: ScoringPlan, strata: IntArray, resamples: int,
              seed: int = 0, attempts: AttemptCells | None = None,
              chunk: int = 250) -> dict[str, FloatArray]:
    """Replicates of the headline figures: name -> (resamples, configs)."""
    rng = np.random.default_rng(seed)
    weights = task_weights(strata, resamples, rng)
    parts: dict[str, list[FloatArray]] = {name: [] for name in HEADLINE}
    if attempts is None:
        for start in range(0, resamples, chunk):
            for name, v in headline(statistics(cells, plan, weights[start:start + chunk])).items():
                parts[name].append(v)
    else:
        for r in range(resamples):
            drawn = attempts.draw(rng)
            for name, v in headline(statistics(drawn, plan, weights[r:r + 1])).items():
                parts[name].append(v)
    return {name: np.concatenate(v, axis=0) for name, v in parts.items()}


def mean_interval(values: FloatArray | Sequence[float], resamples: int, level: float = 0.95,
                  seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a mean over independent units (tasks, repositories):
    the CIs of the pass@k, CLI-Tool-Bench and AgencyBench figures. None with fewer than two
    units, no resamples, or any unit n/a (NaN)."""
    v = np.asarray(values, dtype=np.float64)
    if resamples <= 0 or len(v) < 2 or np.isnan(v).any():
        return None
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # bounded memory for many units
        stop = min(resamples, start + 1000)
        means[start:stop] = v[rng.integers(0, len(v), size=(stop - start, len(v)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def intervals(values: Mapping[str, FloatArray | Sequence[float]], resamples: int,
              level: float = 0.95) -> dict[str, Interval]:
    """:func:`mean_interval` of each named list of per-unit values; n/a ones are left out."""
    out = {}
    for name, v in values.items():
        ci = mean_interval(v, resamples, level)
        if ci is not None:
            out[name] = Interval(low=ci[0], high=ci[1])
    return out

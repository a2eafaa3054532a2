"""Attempts-aware success: unbiased pass@k (Chen et al., 2021) and pass^k (Yao et al., τ-bench).

For a task with n scored attempts of which c passed:
    pass@k = 1 − C(n − c, k) / C(n, k)   (probability that some of k attempts passes)
    pass^k = C(c, k) / C(n, k)           (probability that all of k attempts pass)
Both need n ≥ k; tasks with fewer attempts are left out (and reported).
"""

from __future__ import annotations

from math import comb

import numpy as np
from pydantic import BaseModel, Field

from agentmeter.metrics.frame import (
    SCORED_STATUS,
    FloatArray,
    IntArray,
    TrialFrame,
    quality,
    selected_mask,
)
from agentmeter.metrics.scorecard import Interval
from agentmeter.metrics.uncertainty import intervals


def _pairwise(n: IntArray, c: IntArray, k: int, hat: bool) -> FloatArray:
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    if k < 1:
        raise ValueError("k must be >= 1")
    if np.any(c > n) or np.any(c < 0):
        raise ValueError("need 0 <= c <= n")
    out = np.full(n.shape, np.nan)
    cache: dict[tuple[int, int], float] = {}
    for idx in np.ndindex(n.shape):
        ni, ci = int(n[idx]), int(c[idx])
        if ni < k:
            continue
        key = (ni, ci)
        if key not in cache:
            total = comb(ni, k)
            cache[key] = comb(ci, k) / total if hat else 1.0 - comb(ni - ci, k) / total
        out[idx] = cache[key]
    return out


def pass_at_k(n: IntArray | int, c: IntArray | int, k: int) -> FloatArray:
    """Unbiased pass@k per task (NaN where n < k)."""
    return _pairwise(np.asarray(n), np.asarray(c), k, hat=False)


def pass_hat_k(n: IntArray | int, c: IntArray | int, k: int) -> FloatArray:
    """pass^k per task (NaN where n < k)."""
    return _pairwise(np.asarray(n), np.asarray(c), k, hat=True)


class PassK(BaseModel):
    config_id: str
    k: int
    pass_at_k: float | None
    pass_hat_k: float | None
    n_tasks: int
    n_tasks_short: int  # tasks with fewer than k scored attempts (left out)
    #: bootstrap intervals over tasks ("pass_at_k", "pass_hat_k") when resamples were asked for
    ci: dict[str, Interval] = Field(default_factory=dict)


def attempt_counts(frame: TrialFrame) -> tuple[IntArray, IntArray]:
    """(n, c) of shape (configs, tasks): scored attempts and passed ones (selected tries)."""
    sel = selected_mask(frame) & SCORED_STATUS[frame.status]
    _, y = quality(frame)
    shape = (len(frame.configs), len(frame.task_ids))
    n = np.zeros(shape, dtype=np.int64)
    c = np.zeros(shape, dtype=np.int64)
    np.add.at(n, (frame.config[sel], frame.task[sel]), 1)
    np.add.at(c, (frame.config[sel], frame.task[sel]), (y[sel] == 1).astype(np.int64))
    return n, c


def pass_k_by_config(frame: TrialFrame, k: int, resamples: int = 0,
                     level: float = 0.95) -> list[PassK]:
    """Mean pass@k and pass^k over each configuration's tasks with ≥ k scored attempts, with
    bootstrap intervals over those tasks when ``resamples`` > 0."""
    n, c = attempt_counts(frame)
    at, hat = pass_at_k(n, c, k), pass_hat_k(n, c, k)
    out = []
    for ci, info in enumerate(frame.configs):
        ok = ~np.isnan(at[ci])
        touched = n[ci] > 0
        out.append(PassK(config_id=info.id, k=k,
                         pass_at_k=float(at[ci, ok].mean()) if ok.any() else None,
                         pass_hat_k=float(hat[ci, ok].mean()) if ok.any() else None,
                         n_tasks=int(ok.sum()), n_tasks_short=int((touched & ~ok).sum()),
                         ci=intervals({"pass_at_k": at[ci, ok], "pass_hat_k": hat[ci, ok]},
                                      resamples, level)))
    return out

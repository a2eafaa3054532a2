"""Task-effort tiers (AgentMeter §3.4, Eq. 1).

Per calibration task i, over the configurations that have a scored selected trial on it:
p_i pass rate, r_i mean reward, s_i = 0.7·p_i + 0.3·r_i, and the medians over configurations of
raw tokens T̃_i, turns Ũ_i and interactions Ĩ_i (tool calls). With ℓ(x) = log(1+x) and q the
percentile rank over the calibration tasks:

    E_i = 0.55·(1 − s_i) + 0.25·q(ℓ(T̃_i)) + 0.10·q(ℓ(Ũ_i)) + 0.10·q(ℓ(Ĩ_i))

Tasks are sorted by E (ties by task id) and split into equal thirds: Easy, Medium, Hard (when
the count is not a multiple of three the lower tiers get the extra task). Cost, AMS and model
identity are not inputs.
"""

from __future__ import annotations

import warnings

import numpy as np
from pydantic import BaseModel, Field

from agentmeter.metrics.frame import TIERS, FloatArray, Tier, TrialFrame, cell_matrix

W_SOLVE, W_TOKENS, W_TURNS, W_INTERACTIONS = 0.55, 0.25, 0.10, 0.10
W_PASS, W_REWARD = 0.7, 0.3


class TaskEffort(BaseModel):
    task_id: str
    effort: float
    tier: Tier
    pass_rate: float
    mean_reward: float
    median_tokens: float | None
    median_turns: float | None
    median_interactions: float | None
    n_configs: int


class Calibration(BaseModel):
    """Tier labels from Eq. 1 over a calibration pool (fixed before scoring)."""

    tasks: list[TaskEffort]
    n_configs: int
    notes: list[str] = Field(default_factory=list)

    @property
    def tiers(self) -> dict[str, Tier]:
        return {t.task_id: t.tier for t in self.tasks}


def percentile_rank(x: FloatArray) -> FloatArray:
    """q(x): average rank scaled to [0, 1] ((rank − 1)/(n − 1)); ties share their mean rank;
    a single value gets 0.5. NaN entries get 0.5 (neutral) and do not take part."""
    x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape, 0.5)
    ok = ~np.isnan(x)
    v = x[ok]
    n = v.size
    if n <= 1:
        return out
    order = np.argsort(v, kind="stable")
    sorted_v = v[order]
    ranks = np.empty(n)
    # average ranks of tied groups
    starts = np.flatnonzero(np.concatenate(([True], sorted_v[1:] != sorted_v[:-1])))
    ends = np.concatenate((starts[1:], [n]))
    avg = (starts + ends - 1) / 2.0  # 0-based mean position
    ranks[order] = np.repeat(avg, ends - starts)
    out[ok] = ranks / (n - 1)
    return out


def effort_score(pass_rate: FloatArray, mean_reward: FloatArray, med_tokens: FloatArray,
                 med_turns: FloatArray, med_interactions: FloatArray) -> FloatArray:
    """Eq. 1 over the calibration tasks given per-task aggregates."""
    s = W_PASS * np.asarray(pass_rate) + W_REWARD * np.asarray(mean_reward)
    return (W_SOLVE * (1.0 - s) + W_TOKENS * percentile_rank(np.log1p(med_tokens))
            + W_TURNS * percentile_rank(np.log1p(med_turns))
            + W_INTERACTIONS * percentile_rank(np.log1p(med_interactions)))


def split_thirds(task_ids: list[str], effort: FloatArray) -> list[Tier]:
    """Equal-thirds split by ascending effort (ties by task id)."""
    order = sorted(range(len(task_ids)), key=lambda i: (float(effort[i]), task_ids[i]))
    tiers: list[Tier] = ["easy"] * len(task_ids)
    g: Tier
    for g, part in zip(TIERS, np.array_split(np.array(order, dtype=np.int64), 3), strict=True):
        for i in part:
            tiers[int(i)] = g
    return tiers


def _nanmedian_cols(m: FloatArray) -> FloatArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns -> NaN
        return np.nanmedian(m, axis=0) if m.shape[0] else np.full(m.shape[1], np.nan)


def calibrate(frame: TrialFrame) -> Calibration:
    """Eq. 1 effort and equal-thirds tiers for the tasks of ``frame`` (the calibration pool)."""
    cells = cell_matrix(frame)
    scored = cells.scored
    n_obs = scored.sum(axis=0)
    usable = n_obs > 0
    notes: list[str] = []
    dropped = sorted(frame.task_ids[i] for i in np.flatnonzero(~usable))
    if dropped:
        notes.append(f"{len(dropped)} task(s) have no scored trial and get no tier: "
                     + ", ".join(dropped[:10]) + ("…" if len(dropped) > 10 else ""))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(scored, cells.passed, 0.0).sum(axis=0) / n_obs
        r = np.where(scored, cells.reward, 0.0).sum(axis=0) / n_obs
    meds = {name: _nanmedian_cols(np.where(scored, getattr(cells, name), np.nan))
            for name in ("tokens", "turns", "interactions")}
    for name, values in meds.items():
        missing = int(np.isnan(values[usable]).sum())
        if missing:
            notes.append(f"{missing} task(s) expose no {name}: their q({name}) is the neutral "
                         "0.5")
    idx = np.flatnonzero(usable)
    e = effort_score(p[idx], r[idx], meds["tokens"][idx], meds["turns"][idx],
                     meds["interactions"][idx])
    ids = [frame.task_ids[i] for i in idx]
    tiers = split_thirds(ids, e)

    def opt(v: float) -> float | None:
        return None if np.isnan(v) else float(v)

    tasks = [TaskEffort(task_id=ids[k], effort=float(e[k]), tier=tiers[k],
                        pass_rate=float(p[i]), mean_reward=float(r[i]),
                        median_tokens=opt(meds["tokens"][i]), median_turns=opt(meds["turns"][i]),
                        median_interactions=opt(meds["interactions"][i]), n_configs=int(n_obs[i]))
             for k, i in enumerate(idx)]
    return Calibration(tasks=tasks, n_configs=len(frame.configs), notes=notes)

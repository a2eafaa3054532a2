"""Subset-vs-full validation (AgentMeter §5.4) and stratified core-subset selection.

:func:`rank_agreement` compares two scorings of the same configurations: Spearman's ρ (Pearson
correlation of average ranks), Kendall's τ-b, the mean absolute AMS difference, whether the
top-1 configuration and the top-k set are preserved. :func:`select_core` picks k tasks per tier
whose AMS ranking best preserves the full one (greedy round-robin over tiers, then pairwise swap
refinement), ranking candidates by (Kendall, Spearman, −MAE).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel

from agentmeter.metrics.aggregate import ScoringPlan, statistics
from agentmeter.metrics.frame import TIERS, BoolArray, CellMatrix, FloatArray, Tier
from agentmeter.metrics.scorecard import Scorecard


class RankAgreement(BaseModel):
    n: int
    spearman: float | None
    kendall: float | None
    mae: float | None
    top1_kept: bool | None
    k: int
    topk_kept: bool | None


def average_ranks(x: FloatArray) -> FloatArray:
    """1-based ranks, ties sharing their mean rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sx = x[order]
    starts = np.flatnonzero(np.concatenate(([True], sx[1:] != sx[:-1])))
    ends = np.concatenate((starts[1:], [len(x)]))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(x: FloatArray, y: FloatArray) -> float | None:
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return None if denom == 0 else float((dx * dy).sum() / denom)


def kendall_tau_b(x: FloatArray, y: FloatArray) -> float | None:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    iu = np.triu_indices(len(x), k=1)
    sx = np.sign(x[:, None] - x[None, :])[iu]
    sy = np.sign(y[:, None] - y[None, :])[iu]
    n0 = len(sx)
    tx, ty = int((sx == 0).sum()), int((sy == 0).sum())
    denom = float(np.sqrt((n0 - tx) * (n0 - ty)))
    return None if denom == 0 else float((sx * sy).sum() / denom)


def _top(ids: list[str], values: FloatArray, k: int) -> list[str]:
    order = sorted(range(len(ids)), key=lambda i: (-values[i], ids[i]))
    return [ids[i] for i in order[:k]]


def _known(v: float | None) -> bool:
    return v is not None and not np.isnan(v)


def rank_agreement(a: Mapping[str, float | None], b: Mapping[str, float | None],
                   k: int = 3) -> RankAgreement:
    """Agreement of scoring ``b`` with reference ``a`` over configs scored in both."""
    ids = sorted(c for c in a if _known(a[c]) and _known(b.get(c)))
    if not ids:
        return RankAgreement(n=0, spearman=None, kendall=None, mae=None, top1_kept=None, k=k,
                             topk_kept=None)
    xa = np.array([a[c] for c in ids], dtype=np.float64)
    xb = np.array([b[c] for c in ids], dtype=np.float64)
    top_a = set(ids[i] for i in np.flatnonzero(xa == xa.max()))
    top_b = set(ids[i] for i in np.flatnonzero(xb == xb.max()))
    n = len(ids)
    return RankAgreement(
        n=n, spearman=spearman(xa, xb) if n > 1 else None,
        kendall=kendall_tau_b(xa, xb) if n > 1 else None,
        mae=float(np.abs(xa - xb).mean()), top1_kept=bool(top_a & top_b), k=k,
        topk_kept=set(_top(ids, xa, k)) == set(_top(ids, xb, k)) if n >= k else None)


class CoreSubset(BaseModel):
    tasks: dict[str, list[str]]  # tier -> task ids
    agreement: RankAgreement


def _objective(full: FloatArray, sub: FloatArray) -> tuple[float, float, float]:
    k = kendall_tau_b(full, sub)
    s = spearman(full, sub)
    return (k if k is not None else -2.0, s if s is not None else -2.0,
            -float(np.abs(full - sub).mean()))


def _subset_ams(cells: CellMatrix, plan: ScoringPlan, weights: FloatArray,
                full_tier: dict[Tier, FloatArray]) -> FloatArray:
    """AMS per (candidate, config); a tier with no selected task uses its full score."""
    st = statistics(cells, plan, weights)
    scores = []
    for tp in plan.tiers:
        has = weights[:, tp.tasks].sum(axis=1) > 0
        scores.append(np.where(has[:, None], st.tiers[tp.tier].score, full_tier[tp.tier][None]))
    return np.asarray(np.mean(np.stack(scores, axis=-1), axis=-1))


def select_core(cells: CellMatrix, plan: ScoringPlan, task_ids: list[str], per_tier: int,
                max_rounds: int = 5) -> CoreSubset:
    """k = ``per_tier`` tasks from each tier that best preserve the full AMS ranking."""
    n_t = len(task_ids)
    full_stats = statistics(cells, plan, np.ones((1, n_t)))
    full_tier = {tp.tier: full_stats.tiers[tp.tier].score[0] for tp in plan.tiers}
    keep = ~np.isnan(full_stats.ams[0])
    full = full_stats.ams[0][keep]
    chosen = np.zeros(n_t, dtype=np.bool_)
    want = {tp.tier: min(per_tier, len(tp.tasks)) for tp in plan.tiers}

    def best_of(candidates: list[BoolArray]) -> tuple[int, tuple[float, float, float]]:
        w = np.stack(candidates).astype(np.float64)
        ams = _subset_ams(cells, plan, w, full_tier)[:, keep]
        objs = [_objective(full, row) for row in ams]
        i = max(range(len(objs)), key=lambda j: objs[j])
        return i, objs[i]

    # greedy, round robin over tiers
    for step in range(max(want.values(), default=0)):
        for tp in plan.tiers:
            if step >= want[tp.tier]:
                continue
            free = [int(t) for t in tp.tasks if not chosen[t]]
            cands = []
            for t in free:
                w = chosen.copy()
                w[t] = True
                cands.append(w)
            i, _ = best_of(cands)
            chosen[free[i]] = True
    current = best_of([chosen])[1]
    # swap refinement within tiers
    for _ in range(max_rounds):
        improved = False
        for tp in plan.tiers:
            for t_in in [int(t) for t in tp.tasks if chosen[t]]:
                free = [int(t) for t in tp.tasks if not chosen[t]]
                if not free:
                    continue
                cands = []
                for t_out in free:
                    w = chosen.copy()
                    w[t_in], w[t_out] = False, True
                    cands.append(w)
                i, obj = best_of(cands)
                if obj > current:
                    chosen[t_in], chosen[free[i]] = False, True
                    current, improved = obj, True
        if not improved:
            break
    sub = _subset_ams(cells, plan, chosen[None].astype(np.float64), full_tier)[0]
    ids = [f"{i}" for i in range(len(keep))]
    agreement = rank_agreement(dict(zip(ids, full_stats.ams[0].tolist(), strict=True)),
                               dict(zip(ids, sub.tolist(), strict=True)))
    tiers = {tp.tier: [task_ids[t] for t in tp.tasks if chosen[t]] for tp in plan.tiers}
    return CoreSubset(tasks={g: tiers.get(g, []) for g in TIERS}, agreement=agreement)


def compare_scorecards(reference: Scorecard, other: Scorecard, k: int = 3) -> RankAgreement:
    """AMS agreement of ``other`` (e.g. Core30) with ``reference`` (e.g. Benchmark90) over the
    configurations both scored."""
    return rank_agreement({r.config_id: r.ams for r in reference.rows},
                          {r.config_id: r.ams for r in other.rows}, k)

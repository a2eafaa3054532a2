"""A synthetic grid shaped like the paper's Core30 (6 models × 4 agents × 30 tasks, 10 per tier)
exercising every diagnostic, rank validation, core-subset selection, bootstrap CIs and pass@k.
Expected values are recomputed here with plain loops from the rows."""

from __future__ import annotations

import itertools
import math
import statistics as pystats
from math import comb

import numpy as np
import pytest

from agentmeter.metrics import (
    STATUS_CODE,
    ConfigInfo,
    ScoringSpec,
    TrialFrame,
    compare_scorecards,
    effort_allocation,
    frame_from_arrays,
    kendall_tau_b,
    pass_at_k,
    pass_hat_k,
    pass_k_by_config,
    prepare,
    rank_agreement,
    score,
    select_core,
    spearman,
    table1,
)
from agentmeter.metrics.uncertainty import task_weights

MODELS = ["Qwen3.6+", "DeepSeek-v4-pro", "GLM-5.1", "MiniMax-M2.5", "Sonnet-4.6", "GPT-5.3"]
AGENTS = ["claude-code", "codex", "kimi-cli", "qwen-coder"]
P, F, INF = STATUS_CODE["passed"], STATUS_CODE["failed"], STATUS_CODE["infra_invalid"]


def core30(attempts: int = 1, seed: int = 7) -> tuple[TrialFrame, list[tuple]]:
    rng = np.random.default_rng(seed)
    configs = [ConfigInfo(f"{m}/{a}", f"{m} x {a}", m, a) for m in MODELS for a in AGENTS]
    tasks = [f"task{j:02d}" for j in range(30)]
    tiers = ["easy"] * 10 + ["medium"] * 10 + ["hard"] * 10
    scale = {"easy": 0.1, "medium": 0.4, "hard": 1.5}
    rows = []
    for c in range(24):
        skill = 0.3 + 0.6 * rng.random()
        for t in range(30):
            for a in range(attempts):
                p_pass = skill * (1.0, 0.6, 0.3)[t // 10]
                passed = rng.random() < p_pass
                status = P if passed else (INF if rng.random() < 0.05 else F)
                cost = float(rng.gamma(2.0, scale[tiers[t]] / 2))
                tokens = float(int(cost * 2e6 * (0.5 + rng.random())))
                rows.append((c, t, a, status, 1.0 if passed else 0.0, cost, tokens))
    a_ = list(zip(*rows, strict=True))
    fr = frame_from_arrays(configs, tasks, tiers, config=np.array(a_[0]), task=np.array(a_[1]),
                           attempt=np.array(a_[2]), status=np.array(a_[3]),
                           reward=np.array(a_[4]), cost_usd=np.array(a_[5]),
                           input=np.array(a_[6]), output=np.zeros(len(rows)),
                           turns=np.array(a_[6]) / 1e4, tool_calls=np.array(a_[6]) / 2e4)
    return fr, rows


def test_core30_diagnostics() -> None:
    fr, rows = core30()
    card = score(fr, ScoringSpec(tiers="stored"), budgets=table1())
    assert len(card.rows) == 24 and card.n_tasks == 30
    assert [t.n_tasks for t in card.tiers] == [10, 10, 10]
    for c, r in enumerate(card.rows):
        mine = [x for x in rows if x[0] == c]
        passes = sum(1 for x in mine if x[3] == P)
        assert r.passes == passes and r.pass_rate == pytest.approx(passes / 30)
        for g, lo in (("easy", 0), ("medium", 10), ("hard", 20)):
            assert r.tiers[g].passes == sum(1 for x in mine if x[3] == P and lo <= x[1] < lo + 10)
        tok = sum(x[6] for x in mine)
        usd = sum(x[5] for x in mine)
        assert r.tok_per_pass == (pytest.approx(tok / passes) if passes else None)
        assert r.usd_per_pass == (pytest.approx(usd / passes) if passes else None)
        # tier score by the paper's formulas: infra_invalid contributes zero, |T_g| = 10
        scores = []
        for g, lo in (("easy", 0), ("medium", 10), ("hard", 20)):
            tb = table1().tiers[g]
            valid = [x for x in mine if lo <= x[1] < lo + 10 and x[3] != INF]
            d = 10
            sr = sum(x[4] for x in valid) / d
            au = sum(sum(x[4] for x in valid if x[5] <= b) / d for b in tb.budgets) / 5
            assert tb.tau is not None
            ef = sum(1 for x in valid if x[3] != P and x[5] > tb.tau) / d
            scores.append((0.6 * sr + 0.4 * au) * (1 - ef))
            assert r.tiers[g].score == pytest.approx(scores[-1])
        assert r.ams == pytest.approx(sum(scores) / 3)
    # Δbest, best/worst agent per model, winners
    for m in MODELS:
        same = [r for r in card.rows if r.model == m]
        best = max(r.ams for r in same if r.ams is not None)
        worst = min(r.ams for r in same if r.ams is not None)
        for r in same:
            assert r.delta_best == pytest.approx(best - r.ams)
        summary = next(s for s in card.models if s.model == m)
        assert summary.best_ams == best and summary.spread == pytest.approx(best - worst)
        assert summary.best_agent == next(r.agent for r in same if r.ams == best)
    assert card.winners.ams == [max(card.rows, key=lambda r: r.ams or 0).config_id]
    top = max(r.passes for r in card.rows)
    assert card.winners.passes == [r.config_id for r in card.rows if r.passes == top]
    lowest = min(r.usd_per_pass for r in card.rows if r.usd_per_pass is not None)
    assert card.winners.usd_per_pass == [r.config_id for r in card.rows
                                         if r.usd_per_pass == lowest]
    lowest = min(r.tok_per_pass for r in card.rows if r.tok_per_pass is not None)
    assert card.winners.tok_per_pass == [r.config_id for r in card.rows
                                         if r.tok_per_pass == lowest]


def test_effort_allocation_by_hand() -> None:
    fr, rows = core30()
    alloc = effort_allocation(fr)
    ok = [x for x in rows if x[3] == P]
    bad = [x for x in rows if x[3] == F]
    assert alloc.overall.passed.n == len(ok) and alloc.overall.failed.n == len(bad)
    assert alloc.overall.passed.median_tokens == pytest.approx(pystats.median(x[6] for x in ok))
    assert alloc.overall.failed.mean_tokens == pytest.approx(pystats.mean(x[6] for x in bad))
    assert alloc.overall.failed.median_usd == pytest.approx(pystats.median(x[5] for x in bad))
    hard_ok = [x[6] for x in ok if x[1] >= 20]
    assert alloc.tiers["hard"].passed.median_tokens == pytest.approx(pystats.median(hard_ok))


def _kendall_by_pairs(x: list[float], y: list[float]) -> float:
    conc = disc = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx * dy > 0:
            conc += 1
        else:
            disc += 1
    return (conc - disc) / math.sqrt((conc + disc + tx) * (conc + disc + ty))


def test_rank_statistics_by_hand() -> None:
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 6.0, 7.0, 8.0, 7.0]
    # ranks of y: 1, 2, 3.5, 5, 3.5; Spearman = Pearson of ranks
    ry = [1, 2, 3.5, 5, 3.5]
    mx, my = 3.0, 3.0
    num = sum((a - mx) * (b - my) for a, b in zip([1, 2, 3, 4, 5], ry, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in [1, 2, 3, 4, 5]) * sum((b - my) ** 2 for b in ry))
    assert spearman(np.array(x), np.array(y)) == pytest.approx(num / den)
    assert kendall_tau_b(np.array(x), np.array(y)) == pytest.approx(_kendall_by_pairs(x, y))
    scipy_stats = pytest.importorskip("scipy.stats")
    assert kendall_tau_b(np.array(x), np.array(y)) == pytest.approx(
        scipy_stats.kendalltau(x, y).statistic)
    ag = rank_agreement({"a": 0.5, "b": 0.4, "c": 0.3, "d": 0.1},
                        {"a": 0.45, "b": 0.2, "c": 0.35, "d": None}, k=2)
    assert ag.n == 3 and ag.top1_kept and ag.topk_kept is False
    assert ag.mae == pytest.approx((0.05 + 0.2 + 0.05) / 3)
    assert ag.spearman == pytest.approx(0.5) and ag.kendall == pytest.approx(1 / 3)


def test_core_subset_preserves_ranking() -> None:
    fr, _ = core30()
    full = score(fr, ScoringSpec(tiers="stored"), budgets=table1())
    p = prepare(fr, ScoringSpec(tiers="stored"), budgets=table1())
    core = select_core(p.cells, p.plan, p.frame.task_ids, per_tier=5)
    assert [len(core.tasks[g]) for g in ("easy", "medium", "hard")] == [5, 5, 5]
    assert set(core.tasks["easy"]) <= {f"task{j:02d}" for j in range(10)}
    # recompute the subset scoring independently and compare with the reported agreement
    subset = [t for g in ("easy", "medium", "hard") for t in core.tasks[g]]
    sub = score(fr.select_tasks(subset), ScoringSpec(tiers="stored"), budgets=table1())
    ag = compare_scorecards(full, sub)
    assert ag.kendall == pytest.approx(core.agreement.kendall)
    assert ag.mae == pytest.approx(core.agreement.mae)
    # better than a naive pick of the first five tasks per tier
    naive = [f"task{j:02d}" for lo in (0, 10, 20) for j in range(lo, lo + 5)]
    nv = score(fr.select_tasks(naive), ScoringSpec(tiers="stored"), budgets=table1())
    ag_naive = rank_agreement({r.config_id: r.ams for r in full.rows},
                              {r.config_id: r.ams for r in nv.rows})
    assert ag.kendall is not None and ag_naive.kendall is not None
    assert ag.kendall >= ag_naive.kendall


def test_bootstrap_cis_seeded_and_bracketing() -> None:
    fr, _ = core30()
    spec = ScoringSpec(tiers="stored", resamples=300, seed=3)
    a = score(fr, spec, budgets=table1())
    b = score(fr, spec, budgets=table1())
    assert a.model_dump() == b.model_dump()
    assert a.bootstrap is not None and not a.bootstrap.over_attempts
    inside = 0
    for r in a.rows:
        ci = r.ci["ams"]
        assert ci.low <= ci.high
        inside += ci.low <= (r.ams or 0) <= ci.high
        assert set(r.ci) >= {"ams", "pass_rate", "score_easy", "score_medium", "score_hard"}
    assert inside == 24
    w = task_weights(np.array([0, 0, 0, 1, 1]), 50, np.random.default_rng(0))
    assert (w[:, :3].sum(axis=1) == 3).all() and (w[:, 3:].sum(axis=1) == 2).all()


def test_bootstrap_over_attempts_and_latest_attempt_selection() -> None:
    fr, rows = core30(attempts=3)
    card = score(fr, ScoringSpec(tiers="stored", resamples=40, seed=1), budgets=table1())
    assert card.bootstrap is not None and card.bootstrap.over_attempts
    # the point estimate uses, per (config, task), the latest scored attempt
    for c in (0, 5):
        passes = 0
        for t in range(30):
            cands = [x for x in rows if x[0] == c and x[1] == t and x[3] != INF]
            if cands:
                passes += max(cands, key=lambda x: x[2])[3] == P
        assert card.rows[c].passes == passes
        # Tok/Pass and USD/Pass divide the spending of every attempt, selected or not (§3.5:
        # "Attempted runs remain part of token and cost accounting")
        mine = [x for x in rows if x[0] == c]
        assert card.rows[c].usd == pytest.approx(sum(x[5] for x in mine))
        assert card.rows[c].usd_per_pass == pytest.approx(sum(x[5] for x in mine) / passes)
        assert card.rows[c].tok_per_pass == pytest.approx(sum(x[6] for x in mine) / passes)
        ci = card.rows[c].ci["usd_per_pass"]  # replicates divide the same total spending
        assert ci.low <= sum(x[5] for x in mine) / passes * 1.5


def test_pass_at_k_by_hand() -> None:
    # n=5 attempts, c=2 passed: enumerate all 2-subsets
    subsets = list(itertools.combinations([1, 1, 0, 0, 0], 2))
    assert pass_at_k(5, 2, 2) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_hat_k(5, 2, 2) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) and math.isnan(float(pass_at_k(1, 1, 2)))
    assert pass_at_k(10, 10, 3) == 1.0 and pass_hat_k(10, 0, 3) == 0.0
    fr, rows = core30(attempts=3)
    res = {p.config_id: p for p in pass_k_by_config(fr, 2)}
    c = 0
    vals = []
    for t in range(30):
        outcomes = [x[3] == P for x in rows if x[0] == c and x[1] == t and x[3] != INF]
        if len(outcomes) >= 2:
            vals.append(1 - comb(len(outcomes) - sum(outcomes), 2) / comb(len(outcomes), 2))
    assert res[fr.configs[0].id].pass_at_k == pytest.approx(sum(vals) / len(vals))
    assert res[fr.configs[0].id].n_tasks == len(vals)

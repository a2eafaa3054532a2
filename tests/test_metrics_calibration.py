"""Eq. 1 effort tiers, budget grids and thresholds (derived and from TOML) by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agentmeter.metrics import (
    STATUS_CODE,
    BudgetError,
    BudgetSpec,
    ConfigInfo,
    ScoringSpec,
    TrialFrame,
    calibrate,
    derive_budgets,
    frame_from_arrays,
    percentile_rank,
    prepare,
    table1,
)
from agentmeter.metrics.budgets import round_budget
from agentmeter.metrics.effort import split_thirds

P, F = STATUS_CODE["passed"], STATUS_CODE["failed"]


def test_percentile_rank_by_hand() -> None:
    # ranks 0..n-1 scaled by n-1; ties share their mean position
    assert percentile_rank(np.array([3.0, 1.0, 2.0])).tolist() == [1.0, 0.0, 0.5]
    assert percentile_rank(np.array([2.0, 5.0, 2.0])).tolist() == [0.25, 1.0, 0.25]
    assert percentile_rank(np.array([7.0])).tolist() == [0.5]
    assert percentile_rank(np.array([1.0, np.nan, 3.0])).tolist() == [0.0, 0.5, 1.0]


def effort_frame() -> TrialFrame:
    """3 configs × tasks A, B, C (see test_effort_eq1_by_hand)."""
    cfgs = [ConfigInfo(f"c{i}", f"c{i}", "m", f"a{i}") for i in range(3)]
    per_task = {  # status per config, rewards, tokens, turns, tool calls
        0: ([P, P, P], [1, 1, 1], [100, 200, 300], [1, 2, 3], [0, 1, 2]),
        1: ([P, F, F], [1, 0.5, 0], [1000, 2000, 3000], [5, 5, 5], [10, 10, 10]),
        2: ([F, F, F], [0, 0, 0], [500, 600, 700], [2, 2, 2], [3, 3, 3]),
    }
    rows = [(c, t, v[0][c], v[1][c], v[2][c], v[3][c], v[4][c])
            for t, v in per_task.items() for c in range(3)]
    a = list(zip(*rows, strict=True))
    return frame_from_arrays(cfgs, ["A", "B", "C"], config=np.array(a[0]), task=np.array(a[1]),
                             status=np.array(a[2]), reward=np.array(a[3], dtype=float),
                             input=np.array(a[4], dtype=float), output=np.zeros(9),
                             turns=np.array(a[5], dtype=float),
                             tool_calls=np.array(a[6], dtype=float),
                             cost_usd=np.array(a[4], dtype=float) / 1000)


def test_effort_eq1_by_hand() -> None:
    cal = calibrate(effort_frame())
    e = {t.task_id: t for t in cal.tasks}
    # s = 0.7 p + 0.3 r
    s_b = 0.7 * (1 / 3) + 0.3 * 0.5
    # medians: tokens A 200, B 2000, C 600 -> q 0, 1, .5; turns 2, 5, 2 -> q .25, 1, .25;
    # tool calls 1, 10, 3 -> q 0, 1, .5
    assert e["A"].effort == pytest.approx(0.55 * 0 + 0.25 * 0 + 0.10 * 0.25 + 0.10 * 0)
    assert e["B"].effort == pytest.approx(0.55 * (1 - s_b) + 0.25 * 1 + 0.10 * 1 + 0.10 * 1)
    assert e["C"].effort == pytest.approx(0.55 * 1 + 0.25 * 0.5 + 0.10 * 0.25 + 0.10 * 0.5)
    assert (e["A"].median_tokens, e["B"].median_turns, e["C"].median_interactions) == (200, 5, 3)
    assert cal.tiers == {"A": "easy", "C": "medium", "B": "hard"}


def test_equal_thirds_split() -> None:
    ids = [f"t{i}" for i in range(7)]
    tiers = split_thirds(ids, np.array([0.9, 0.1, 0.5, 0.3, 0.3, 0.8, 0.2]))
    # ascending effort (ties by id): t1 .1, t6 .2, t3 .3, t4 .3, t2 .5, t5 .8, t0 .9 -> 3/2/2
    assert dict(zip(ids, tiers, strict=True)) == {
        "t1": "easy", "t6": "easy", "t3": "easy", "t4": "medium", "t2": "medium",
        "t5": "hard", "t0": "hard"}
    assert split_thirds([f"t{i}" for i in range(90)], np.arange(90.0)).count("medium") == 30


def test_derived_budgets_by_hand() -> None:
    spec = derive_budgets({"easy": np.array([0.0, 1.0, 2.0, 3.0, 4.0, np.nan])},
                          {"easy": np.arange(1.0, 11.0)})
    # linear quantiles of 0..4 at .1 .25 .5 .75 .9 -> .4 1 2 3 3.6; P90 of 1..10 -> 9.1
    assert spec.tiers["easy"].budgets == [0.4, 1.0, 2.0, 3.0, 3.6]
    assert spec.tiers["easy"].tau == pytest.approx(9.1)
    assert "medium" not in spec.tiers  # no priced run -> no grid (AMS n/a, with a note)
    assert round_budget(0.123) == 0.12 and round_budget(0.00042) == 0.00042
    nofail = derive_budgets({"hard": np.array([1.0])}, {"hard": np.zeros(0)})
    # one cost: the five quantiles coincide; the grid keeps its five points (Eq. 4 averages
    # over five), unless merging is asked for
    assert nofail.tiers["hard"].budgets == [1.0] * 5 and nofail.tiers["hard"].tau is None
    merged = derive_budgets({"hard": np.array([1.0])}, {"hard": np.zeros(0)}, duplicates="merge")
    assert merged.tiers["hard"].budgets == [1.0]
    # rounded quantiles that coincide: .1014 .102 .103 .104 round to .10; the P90 .3416 -> .34
    tied = derive_budgets({"easy": np.array([0.101, 0.102, 0.103, 0.104, 0.5])}, {})
    assert tied.tiers["easy"].budgets == [0.1, 0.1, 0.1, 0.1, 0.34]


def test_calibration_drives_tiers_and_budgets() -> None:
    p = prepare(effort_frame())
    by_tier = {tp.tier: [p.frame.task_ids[i] for i in tp.tasks] for tp in p.plan.tiers}
    assert by_tier == {"easy": ["A"], "medium": ["C"], "hard": ["B"]}
    hard = p.plan.tiers[2]
    # B's costs 1, 2, 3 (tokens/1000): grid quantiles 1.2, 1.5, 2, 2.5, 2.8; failed 2, 3 -> 2.9
    assert hard.budgets == [1.2, 1.5, 2.0, 2.5, 2.8] and hard.tau == pytest.approx(2.9)
    assert p.plan.tiers[0].tau is None and any("τ" in n for n in p.notes)


def test_table1_and_toml_errors(tmp_path: Path) -> None:
    t1 = table1()
    assert t1.alpha == 0.6
    assert t1.tiers["easy"].budgets == [0.01, 0.04, 0.10, 0.18, 0.26]
    assert t1.tiers["medium"].tau == 0.40 and t1.tiers["hard"].budgets[-1] == 3.47
    bad = tmp_path / "grid.toml"
    bad.write_text("[tiers.easy]\nbudgets = [0.1, -1]\ntau = 0.1\n")
    with pytest.raises(BudgetError, match=r"grid.toml: field tiers.easy.budgets"):
        BudgetSpec.load(bad)
    bad.write_text("[tiers.easy\n")
    with pytest.raises(BudgetError, match="grid.toml"):
        BudgetSpec.load(bad)
    ok = tmp_path / "ok.toml"
    ok.write_text("alpha = 0.5\n[tiers.easy]\nbudgets = [0.3, 0.1]\n")
    spec = BudgetSpec.load(ok)
    assert spec.tiers["easy"].budgets == [0.1, 0.3] and spec.tiers["easy"].tau is None
    p = prepare(effort_frame(), ScoringSpec(), budgets=spec)
    assert p.plan.alpha == 0.5 and p.plan.tiers[1].budgets is None
    assert any("tier medium has no budget grid" in n for n in p.notes)
    assert math.isclose(prepare(effort_frame(), ScoringSpec(alpha=0.7),
                                budgets=spec).plan.alpha, 0.7)

"""AMS, Tok./Pass and USD/Pass recomputed by hand from the AgentMeter paper's equations on a
small hand-made run, independently of the metrics code (seed 000_f81dff92bed29cd1.txt, §3.5,
§4.1 Eq. 2, §4.2 Eqs. 3-8, Table 1).

The run (one configuration, stored through the Store API, scored by ``agentmeter score``):
prices per million tokens p_in 2, p_out 10, p_create 2.5, p_hit 0.5 USD; Table 1's grids.

task tier    attempt try status         X (input)  Y (out)   A       H       T = X+Y    C (Eq. 2)
e1   easy    0       0   passed         10,000     3,000     0       0       13,000     0.05
e2   easy    0       0   failed         50,000     10,000    0       0       60,000     0.20
m1   medium  0       0   failed R=0.5   200,000    10,000    20,000  100,000 210,000    0.36
m2   medium  0       0   failed         25,000     5,000     0       0       30,000     0.10
m2   medium  1       0   passed         5,000      1,000     0       0       6,000      0.02
h1   hard    0       0   infra_invalid  1,000,000  100,000   0       0       1,100,000  3.00
h2   hard    0       0   infra_invalid  100,000    10,000    0       0       110,000    0.30
h2   hard    0       1   passed         250,000    50,000    0       0       300,000    1.00

Eq. 2 by hand: C = (2·N + 10·Y + 2.5·A + 0.5·H)/1e6 with N = max(X − A − H, 0), e.g.
m1: N = 200,000 − 20,000 − 100,000 = 80,000 → 160,000 + 100,000 + 50,000 + 50,000 = 360,000
→ 0.36; e1: 2·10,000 + 10·3,000 = 50,000 → 0.05; h1: 2,000,000 + 1,000,000 → 3.00.

Selection (§3.5, latest completed): m2 → attempt 1 (passed, 0.02); h2 → try 1 (passed, 1.00).

Easy (B = .01 .04 .10 .18 .26, τ = .12): R = (1, 0). SR = 1/2.
  CBQ(b) = (1·[.05 ≤ b] + 0)/2 = 0, 0, .5, .5, .5 → CostAUBQC = 1.5/5 = .3
  EFR = [e2 failed ∧ .20 > .12]/2 = 1/2
  TierScore = (.6·.5 + .4·.3)·(1 − .5) = .42·.5 = .21
Medium (B = .03 .07 .24 .58 .82, τ = .40): R = (.5, 1). SR = 1.5/2 = .75
  CBQ(b) = (.5·[.36 ≤ b] + 1·[.02 ≤ b])/2 = .5, .5, .5, .75, .75 → CostAUBQC = 3/5 = .6
  EFR = [m1 failed ∧ .36 > .40]/2 = 0
  TierScore = .6·.75 + .4·.6 = .45 + .24 = .69
Hard (B = .06 .21 .87 2.34 3.47, τ = 2.18), h1 infra_invalid.
  Paper's reading (default, "Missing, task-invalid, failed, and over-budget trials contribute
  zero at that budget point"): |T_hard| = 2, h1 contributes 0 everywhere.
  SR = 1/2; CBQ = (1·[1.00 ≤ b])/2 = 0, 0, 0, .5, .5 → .2; EFR = 0
  TierScore = .6·.5 + .4·.2 = .38
  AMS = (.21 + .69 + .38)/3 = 1.28/3 = 0.42666…
  --infra-invalid exclude: |T_hard| = 1: SR 1, CBQ 0, 0, 0, 1, 1 → .4, TierScore .6 + .16 = .76
  AMS = (.21 + .69 + .76)/3 = 1.66/3 = 0.55333…

Diagnostics over *every* try ("Attempted runs remain part of token and cost accounting"),
divided by the successes (e1, m2, h2 = 3; Pass/6):
  T = 13,000 + 60,000 + 210,000 + 30,000 + 6,000 + 1,100,000 + 110,000 + 300,000 = 1,829,000
  Tok./Pass = 1,829,000/3 = 609,666.66…
  C = .05 + .20 + .36 + .10 + .02 + 3.00 + .30 + 1.00 = 5.03;  USD/Pass = 5.03/3 = 1.67666…
(Counting only the selected attempts' tries, ``--per-pass-spend selected``, leaves out m2's
attempt 0: 4.93 and 1,799,000.)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fractions import Fraction as Fr
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.records import (
    AgentSpec,
    ConfigRecord,
    ModelSpec,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.store.db import Store

S = TrialStatus
TIERS = {"e1": "easy", "e2": "easy", "m1": "medium", "m2": "medium", "h1": "hard", "h2": "hard"}
#: (task, attempt, try, status, reward, X, Y, A, H) — the table in the module docstring
TRIES = [
    ("e1", 0, 0, S.PASSED, 1.0, 10_000, 3_000, 0, 0),
    ("e2", 0, 0, S.FAILED, 0.0, 50_000, 10_000, 0, 0),
    ("m1", 0, 0, S.FAILED, 0.5, 200_000, 10_000, 20_000, 100_000),
    ("m2", 0, 0, S.FAILED, 0.0, 25_000, 5_000, 0, 0),
    ("m2", 1, 0, S.PASSED, 1.0, 5_000, 1_000, 0, 0),
    ("h1", 0, 0, S.INFRA_INVALID, None, 1_000_000, 100_000, 0, 0),
    ("h2", 0, 0, S.INFRA_INVALID, None, 100_000, 10_000, 0, 0),
    ("h2", 0, 1, S.PASSED, 1.0, 250_000, 50_000, 0, 0),
]
#: Table 1 (USD): budget grid and τ per tier
TABLE1 = {"easy": ([Fr("0.01"), Fr("0.04"), Fr("0.10"), Fr("0.18"), Fr("0.26")], Fr("0.12")),
          "medium": ([Fr("0.03"), Fr("0.07"), Fr("0.24"), Fr("0.58"), Fr("0.82")], Fr("0.40")),
          "hard": ([Fr("0.06"), Fr("0.21"), Fr("0.87"), Fr("2.34"), Fr("3.47")], Fr("2.18"))}
PRICES = """date = "2026-06-04"
currency = "USD"
label = "hand prices"
[models."hand/m"]
input = 2
output = 10
cache_write = 2.5
cache_read = 0.5
"""

# the hand results of the docstring, as exact fractions
AMS_ZERO = Fr(128, 300)      # (.21 + .69 + .38)/3
AMS_EXCLUDE = Fr(166, 300)   # (.21 + .69 + .76)/3
TOK_PER_PASS = Fr(1_829_000, 3)
USD_PER_PASS = Fr(503, 300)  # 5.03/3


def eq2(x: int, y: int, a: int, h: int) -> Fr:
    """Eq. 2 with the hand prices, exactly."""
    n = max(x - a - h, 0)
    return (2 * n + 10 * y + Fr(5, 2) * a + Fr(1, 2) * h) / 1_000_000


def test_the_hand_arithmetic_follows_the_equations() -> None:
    """The docstring's numbers from Eqs. 2-8 in plain fractions (no agentmeter code)."""
    costs = [eq2(*t[5:]) for t in TRIES]
    assert costs == [Fr("0.05"), Fr("0.20"), Fr("0.36"), Fr("0.10"), Fr("0.02"), Fr(3),
                     Fr("0.30"), Fr(1)]
    # the selected trial per task (§3.5, latest completed; by hand, see the docstring):
    # rows 0 e1, 1 e2, 2 m1, 4 m2 attempt 1, 5 h1, 7 h2 try 1
    selected = {TRIES[i][0]: (None, TRIES[i], costs[i]) for i in (0, 1, 2, 4, 5, 7)}

    def tier_score(tier: str, exclude: bool) -> Fr:
        grid, tau = TABLE1[tier]
        cells = [(t, c) for _, t, c in (selected[k] for k in TIERS if TIERS[k] == tier)]
        counted = [(t, c) for t, c in cells if not (exclude and t[3] is S.INFRA_INVALID)]
        d = len(counted)
        quality = [(Fr(t[4] or 0) if t[3] is not S.INFRA_INVALID else Fr(0), t[3] is S.PASSED, c,
                    t[3] is S.INFRA_INVALID) for t, c in counted]
        sr = sum((r for r, _, _, _ in quality), Fr(0)) / d                       # Eq. 6
        cbq = [sum((r for r, _, c, _ in quality if c <= b), Fr(0)) / d for b in grid]  # Eq. 3
        aubqc = sum(cbq, Fr(0)) / len(grid)                                     # Eq. 4
        efr = Fr(sum(1 for _, y, c, infra in quality if not infra and not y and c > tau), d)
        return (Fr(3, 5) * sr + Fr(2, 5) * aubqc) * (1 - efr)                   # Eqs. 5, 7

    assert [tier_score(g, False) for g in TABLE1] == [Fr("0.21"), Fr("0.69"), Fr("0.38")]
    assert [tier_score(g, True) for g in TABLE1] == [Fr("0.21"), Fr("0.69"), Fr("0.76")]
    assert sum((tier_score(g, False) for g in TABLE1), Fr(0)) / 3 == AMS_ZERO      # Eq. 8
    assert sum((tier_score(g, True) for g in TABLE1), Fr(0)) / 3 == AMS_EXCLUDE
    passes = sum(1 for _, t, _ in selected.values() if t[3] is S.PASSED)
    assert passes == 3
    assert Fr(sum(t[5] + t[6] for t in TRIES), passes) == TOK_PER_PASS
    assert sum(costs, Fr(0)) / passes == USD_PER_PASS


def _populate(root: Path) -> None:
    with Store.open(root) as store:
        store.create_run(RunRecord(id="hand", created_at=datetime(2026, 6, 4, tzinfo=UTC),
                                   status="finished"))
        store.upsert_config(ConfigRecord(id="A", label="hand × agent",
                                         model=ModelSpec(name="hand/m", price_key="hand/m"),
                                         agent=AgentSpec(name="agent")), "hand")
        for tid, tier in TIERS.items():
            store.upsert_task(TaskRecord(id=tid, digest="d", tier=tier), "hand")  # type: ignore[arg-type]
        for task, attempt, try_no, status, reward, x, y, a, h in TRIES:
            passed = None if status is S.INFRA_INVALID else status is S.PASSED
            store.save_trial(TrialRecord(
                id=f"A:{task}:{attempt}", run_id="hand", config_id="A", task_id=task,
                attempt=attempt, try_number=try_no, status=status, reward=reward, passed=passed,
                usage=TokenUsage(input=x, output=y, cache_creation=a, cache_read=h),
                cost_usd=None, model_calls=1))  # priced by `score` under the hand prices


def _score(tmp_path: Path, *extra: str) -> dict[str, Any]:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    r = CliRunner().invoke(app, ["score", "hand", "--store", str(tmp_path / "store"),
                                 "--tiers", "stored", "--budgets", "table1", "--prices",
                                 str(prices), "--json", *extra])
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["scorecard"]["rows"][0]
    assert row["config_id"] == "A"
    return row  # type: ignore[no-any-return]


def test_score_reproduces_the_hand_figures(tmp_path: Path) -> None:
    _populate(tmp_path / "store")
    row = _score(tmp_path)
    # float arithmetic of sums of cents: equal to the exact fraction to 1e-12
    assert row["passes"] == 3 and row["pass_rate"] == pytest.approx(0.5, abs=0)
    assert row["usd"] == pytest.approx(float(Fr("5.03")), rel=1e-12, abs=0)
    assert row["tokens"] == 1_829_000
    assert row["tok_per_pass"] == pytest.approx(float(TOK_PER_PASS), rel=1e-12, abs=0)
    assert row["usd_per_pass"] == pytest.approx(float(USD_PER_PASS), rel=1e-12, abs=0)
    tiers = row["tiers"]
    assert [tiers[g]["score"] for g in ("easy", "medium", "hard")] == pytest.approx(
        [0.21, 0.69, 0.38], rel=1e-12, abs=0)
    assert tiers["easy"]["cbq"] == pytest.approx([0, 0, 0.5, 0.5, 0.5], abs=1e-15)
    assert tiers["medium"]["cbq"] == pytest.approx([0.5, 0.5, 0.5, 0.75, 0.75], abs=1e-15)
    assert tiers["hard"]["cbq"] == pytest.approx([0, 0, 0, 0.5, 0.5], abs=1e-15)
    assert tiers["easy"]["efr"] == 0.5 and tiers["hard"]["n_counted"] == 2
    assert row["ams"] == pytest.approx(float(AMS_ZERO), rel=1e-12, abs=0)
    excluded = _score(tmp_path, "--infra-invalid", "exclude")
    assert excluded["tiers"]["hard"]["n_counted"] == 1
    assert excluded["ams"] == pytest.approx(float(AMS_EXCLUDE), rel=1e-12, abs=0)
    # the alternative reading changes AMS only: the diagnostics count every try either way
    assert excluded["usd_per_pass"] == row["usd_per_pass"]
    # --per-pass-spend selected: the selected attempts' tries only (the docstring's last line)
    selected = _score(tmp_path, "--per-pass-spend", "selected")
    assert selected["usd_per_pass"] == pytest.approx(4.93 / 3, rel=1e-12)
    assert selected["tok_per_pass"] == pytest.approx(1_799_000 / 3, rel=1e-12)
    assert selected["ams"] == row["ams"]


@pytest.mark.parametrize("rounding", ["cents", "none"])
def test_derived_budgets_under_both_rounding_readings(tmp_path: Path, rounding: str) -> None:
    """``--budgets derive``: grids = the tier's P10/25/50/75/90 of the scored selected runs'
    costs, τ = P90 of the failed ones (linear quantiles), rounded to cents or not
    (``--budget-rounding``, docs/metrics.md); AMS from Eqs. 3-8 written out here again."""
    import numpy as np

    def rnd(v: float) -> float:
        if rounding == "none":
            return v
        return round(v, 2) or float(f"{v:.2g}")

    # scored selected trials (h1 is infra_invalid: not in the pools): (reward, passed, cost)
    cells = {"easy": [(1.0, True, 0.05), (0.0, False, 0.20)],
             "medium": [(0.5, False, 0.36), (1.0, True, 0.02)],
             "hard": [(0.0, False, None), (1.0, True, 1.00)]}  # h1: contributes zero
    scores = []
    for cs in cells.values():
        pool = [c for _, _, c in cs if c is not None]
        grid = [rnd(float(q)) for q in np.quantile(pool, [0.10, 0.25, 0.50, 0.75, 0.90])]
        failed = [c for _, y, c in cs if c is not None and not y]
        tau = rnd(float(np.quantile(failed, 0.9))) if failed else None
        sr = sum(r for r, _, _ in cs) / len(cs)
        cbq = [sum(r for r, _, c in cs if c is not None and c <= b) / len(cs) for b in grid]
        efr = sum(1 for _, y, c in cs if c is not None and not y and tau is not None
                  and c > tau) / len(cs)
        scores.append(((0.6 * sr + 0.4 * sum(cbq) / len(grid)) * (1 - efr), grid, tau))
    row, tiers = _score_derived(tmp_path, rounding)
    for (_, grid, tau), setup in zip(scores, tiers, strict=True):
        assert setup["budgets"] == pytest.approx(grid, rel=1e-12) and setup["tau"] == tau
    assert row["ams"] == pytest.approx(sum(s for s, _, _ in scores) / 3, rel=1e-12)


def _score_derived(tmp_path: Path, rounding: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    _populate(tmp_path / "store")
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    r = CliRunner().invoke(app, ["score", "hand", "--store", str(tmp_path / "store"),
                                 "--tiers", "stored", "--budgets", "derive", "--prices",
                                 str(prices), "--json", "--budget-rounding", rounding])
    assert r.exit_code == 0, r.stderr
    card = json.loads(r.stdout)["scorecard"]
    return card["rows"][0], card["tiers"]


def test_rounding_notes_name_merged_and_zeroed_points() -> None:
    """``score`` warns when cents merge distinct quantiles or would zero a value."""
    import numpy as np

    from agentmeter.metrics.budgets import round_budget, rounding_notes

    small = {"easy": np.array([0.0031, 0.0052, 0.0068, 0.0102, 0.012])}
    notes = rounding_notes(small, {"easy": np.array([0.0052])})
    assert any("merges points" in n and "--budget-rounding none" in n for n in notes)
    assert any("would round to 0" in n for n in notes)
    assert round_budget(0.0052) == 0.01 and round_budget(0.0031) == 0.0031  # 2 sig. figures
    assert round_budget(0.0052, None) == 0.0052
    assert round_budget(0.0123) == 0.01 and round_budget(0.0123, None) == 0.0123
    assert rounding_notes({"easy": np.array([0.5, 1.0, 2.0])}, {}) == []

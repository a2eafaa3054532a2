"""AgentMeter cost (Eq. 2) and score (Eqs. 3–8) against hand-computed fixtures, plus
hypothesis properties of the score."""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmeter.metrics import (
    STATUS_CODE,
    BudgetSpec,
    ConfigInfo,
    ScoringSpec,
    TrialFrame,
    UsdRates,
    billable_cost,
    cbq,
    cost_aubqc,
    efr,
    frame_from_arrays,
    resolve_costs,
    score,
    table1,
    tier_score,
)
from agentmeter.pricing import ModelRates, PriceBook, PricingSnapshot
from agentmeter.records import TokenUsage

P, F, INF = STATUS_CODE["passed"], STATUS_CODE["failed"], STATUS_CODE["infra_invalid"]


# --- Eq. 2 ---------------------------------------------------------------------------------

def test_billable_cost_by_hand() -> None:
    rates = UsdRates(input=2e-6, output=8e-6, cache_write=2.5e-6, cache_read=0.5e-6)
    # X=1000 (incl. cached), Y=200, A=100, H=300 -> N = 600
    c = billable_cost(rates, np.array([1000.0]), np.array([200.0]), np.array([100.0]),
                      np.array([300.0]))
    assert c[0] == pytest.approx((600 * 2 + 200 * 8 + 100 * 2.5 + 300 * 0.5) / 1e6)
    # N is clipped at zero; unexposed components are not imputed; nothing exposed -> NaN
    c = billable_cost(rates, np.array([100.0, np.nan, np.nan]), np.array([0.0, 10.0, np.nan]),
                      np.array([80.0, np.nan, np.nan]), np.array([80.0, np.nan, np.nan]))
    assert c[0] == pytest.approx((0 + 80 * 2.5 + 80 * 0.5) / 1e6)
    assert c[1] == pytest.approx(10 * 8 / 1e6)
    assert math.isnan(c[2])


def test_currency_conversion_and_missing_cache_rates() -> None:
    # CNY prices at 1 USD = 6.77 CNY, no cache rates: cache tokens make the cost n/a, unless
    # the entry chose cache_price_fallback = "input" (then they bill as input)
    plain = ModelRates(input=Decimal(4), output=Decimal(16))
    args = (np.array([1000.0]), np.array([100.0]), np.array([0.0]), np.array([400.0]))
    assert math.isnan(billable_cost(UsdRates.from_model_rates(plain, 1 / 6.77), *args)[0])
    chosen = plain.model_copy(update={"cache_price_fallback": "input"})
    c = billable_cost(UsdRates.from_model_rates(chosen, usd_per_unit=1 / 6.77), *args)
    assert c[0] == pytest.approx((600 * 4 + 100 * 16 + 400 * 4) / 1e6 / 6.77)


usage_part = st.one_of(st.none(), st.integers(0, 5_000_000))


@given(x=usage_part, y=usage_part, a=usage_part, h=usage_part)
@settings(max_examples=150)
def test_vectorised_cost_matches_pricebook(x: int | None, y: int | None, a: int | None,
                                           h: int | None) -> None:
    snap = PricingSnapshot(date=date(2026, 6, 4), currency="CNY", usd_per_unit=0.15,
                           models={"p/m": ModelRates(input=Decimal("2"), output=Decimal("8"),
                                                     cache_write=Decimal("2.5"),
                                                     cache_read=Decimal("0.2"))})
    book = PriceBook([snap], use_genai_prices=False, include_scripted=False)
    expected = book.cost_usd("p/m", TokenUsage(input=x, output=y, cache_creation=a,
                                                cache_read=h))
    quote = book.quote("p/m")
    assert quote is not None
    got = billable_cost(UsdRates.from_model_rates(quote.rates, quote.usd_per_unit),
                        *(np.array([np.nan if v is None else float(v)]) for v in (x, y, a, h)))
    if expected is None:
        assert math.isnan(got[0])
    else:
        assert got[0] == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_resolve_costs_stored_priced_repriced_unpriced() -> None:
    cfgs = [ConfigInfo("a", "a", "scripted/solver", "x", "scripted/solver"),
            ConfigInfo("b", "b", "nope/nope", "x", "nope/nope")]
    fr = frame_from_arrays(cfgs, ["t"], config=np.array([0, 0, 1]), task=np.zeros(3),
                           attempt=np.array([0, 1, 0]), status=np.array([P, P, P]),
                           input=np.array([1000.0, 1000.0, 10.0]),
                           output=np.array([100.0, 100.0, 1.0]),
                           cost_usd=np.array([0.5, np.nan, np.nan]))
    book = PriceBook(use_genai_prices=False)  # scripted FAKE prices: in 1, out 4 per M
    r = resolve_costs(fr, book)
    assert r.cost_usd[0] == 0.5  # stored cost is kept
    assert r.cost_usd[1] == pytest.approx((1000 * 1 + 100 * 4) / 1e6)
    assert math.isnan(r.cost_usd[2]) and r.unpriced_configs == ["b"]
    assert any("FAKE" in n for n in r.notes) and any("nope/nope" in n for n in r.notes)
    rr = resolve_costs(fr, book, reprice=True)
    assert rr.cost_usd[0] == pytest.approx((1000 * 1 + 100 * 4) / 1e6)
    assert any("repriced" in n for n in rr.notes)
    none = resolve_costs(fr, None)
    assert math.isnan(none.cost_usd[1]) and "no price book" in none.notes[0]


# --- Eqs. 3-8 on a hand fixture --------------------------------------------------------------

TASKS = ["e1", "e2", "m1", "m2", "h1", "h2"]
TIERS = ["easy", "easy", "medium", "medium", "hard", "hard"]


def hand_frame() -> TrialFrame:
    """Config A (model M, agent x) and B (model M, agent y); see test_hand_scoring."""
    cfgs = [ConfigInfo("A", "M x x", "M", "x"), ConfigInfo("B", "M x y", "M", "y")]
    rows = [  # config, task, try, status, reward, cost, tokens
        (0, 0, 0, P, 1.0, 0.05, 100), (0, 1, 0, F, 0.0, 0.20, 400),
        (0, 2, 0, F, 0.5, 0.50, 900), (0, 3, 0, P, 1.0, 0.02, 50),
        (0, 4, 0, INF, None, 5.00, 7000),
        (0, 5, 0, INF, None, 0.30, 1000), (0, 5, 1, P, 1.0, 1.00, 3000),
        (1, 0, 0, F, 0.0, 0.01, 10), (1, 1, 0, F, 0.0, 0.01, 10),
        (1, 2, 0, F, 0.0, 0.01, 10), (1, 3, 0, F, 0.0, 0.01, 10),
        (1, 4, 0, P, 1.0, 0.01, 10),  # h2 missing for B
    ]
    a = list(zip(*rows, strict=True))
    return frame_from_arrays(
        cfgs, TASKS, TIERS, config=np.array(a[0]), task=np.array(a[1]),
        try_order=np.array(a[2]), status=np.array(a[3]),
        reward=np.array([np.nan if v is None else v for v in a[4]]),
        passed=np.array([1.0 if s == P else (np.nan if s == INF else 0.0) for s in a[3]]),
        cost_usd=np.array(a[5]), input=np.array(a[6], dtype=float), output=np.zeros(len(rows)))


def test_hand_scoring_table1() -> None:
    # the "exclude" reading of infra_invalid (the default is "zero": test_infra_zero_default)
    card = score(hand_frame(), ScoringSpec(tiers="stored", infra_invalid="exclude"),
                 budgets=table1())
    a = card.row("A")
    # easy: B=[.01,.04,.10,.18,.26], tau .12; e1 pass C=.05, e2 fail C=.20
    e = a.tiers["easy"]
    assert e.cbq == pytest.approx([0, 0, 0.5, 0.5, 0.5])
    assert e.sr == 0.5 and e.cost_aubqc == pytest.approx(0.3) and e.efr == 0.5
    assert e.score == pytest.approx((0.6 * 0.5 + 0.4 * 0.3) * 0.5)
    # medium: B=[.03,.07,.24,.58,.82], tau .40; m1 R=.5 failed C=.5, m2 pass C=.02
    m = a.tiers["medium"]
    assert m.cbq == pytest.approx([0.5, 0.5, 0.5, 0.75, 0.75])
    assert m.sr == 0.75 and m.efr == 0.5
    assert m.score == pytest.approx((0.6 * 0.75 + 0.4 * 0.6) * 0.5)
    # hard: h1 infra_invalid (excluded), h2 latest try passed C=1.0; B=[.06,.21,.87,2.34,3.47]
    h = a.tiers["hard"]
    assert h.n_counted == 1 and h.cbq == pytest.approx([0, 0, 0, 1, 1])
    assert h.score == pytest.approx(0.6 * 1 + 0.4 * 0.4)
    assert a.ams == pytest.approx((0.21 + 0.345 + 0.76) / 3)
    # diagnostics: 3 passes; spending includes every try, infra_invalid ones too
    assert a.passes == 3 and a.pass_rate == pytest.approx(3 / 6)
    assert a.n_infra_invalid == 1 and a.n_scored == 5
    assert a.usd == pytest.approx(0.05 + 0.2 + 0.5 + 0.02 + 5.0 + 0.3 + 1.0)
    assert a.tok_per_pass == pytest.approx((100 + 400 + 900 + 50 + 7000 + 1000 + 3000) / 3)
    assert a.usd_per_pass == pytest.approx(7.07 / 3)
    # B: everything cheap; h2 missing counts as zero in a denominator of 2
    b = card.row("B")
    assert b.tiers["easy"].score == 0.0 and b.tiers["medium"].score == 0.0
    assert b.tiers["hard"].sr == 0.5 and b.tiers["hard"].cost_aubqc == pytest.approx(0.5)
    assert b.ams == pytest.approx((0.6 * 0.5 + 0.4 * 0.5) / 3)
    assert b.n_missing == 1 and b.usd_per_pass == pytest.approx(0.05)
    assert a.ams is not None and b.ams is not None
    assert a.delta_best == 0.0 and b.delta_best == pytest.approx(a.ams - b.ams)
    assert card.winners.ams == ["A"] and card.winners.usd_per_pass == ["B"]
    assert card.winners.passes == ["A"]
    assert card.models[0].best_agent == "x" and card.models[0].worst_agent == "y"
    assert any("infra_invalid" in n for n in card.notes)


def test_infra_zero_default() -> None:
    """The paper's reading is the default: h1 (infra_invalid, C = 5.00 > τ_hard) stays in the
    denominator and contributes zero everywhere, EFR included (as a missing trial would)."""
    card = score(hand_frame(), ScoringSpec(tiers="stored"), budgets=table1())
    assert card.infra_policy == "zero"
    h = card.row("A").tiers["hard"]
    assert h.n_counted == 2 and h.sr == 0.5 and h.efr == 0.0
    assert h.score == pytest.approx(0.6 * 0.5 + 0.4 * 0.2)
    explicit = score(hand_frame(), ScoringSpec(tiers="stored", infra_invalid="zero"),
                     budgets=table1())
    assert explicit.row("A").ams == card.row("A").ams
    assert card.row("A").ams == pytest.approx((0.21 + 0.345 + 0.38) / 3)


def test_scalar_forms_match_paper_equations() -> None:
    assert cbq([1, 0, 0.5], [0.1, 0.0, 0.3], 0.2) == pytest.approx(1 / 3)
    assert cost_aubqc([1, 0.5], [0.1, 0.3], [0.2, 0.4]) == pytest.approx((0.5 + 0.75) / 2)
    assert efr([True, False, False], [9, 9, 0.1], 1.0) == pytest.approx(1 / 3)
    assert tier_score(0.5, 0.3, 0.5, alpha=0.6) == pytest.approx(0.21)
    assert tier_score(0.5, 0.3, 0.5, alpha=1.0) == pytest.approx(0.25)


def test_na_cells_never_crash_or_zero() -> None:
    fr = hand_frame()
    # a config with no trials at all, a tier without tasks, unknown costs
    fr2 = frame_from_arrays(fr.configs + [ConfigInfo("C", "C", "N", "z")], TASKS,
                            ["easy", "easy", "medium", "medium", None, None],
                            config=fr.config, task=fr.task, try_order=fr.try_order,
                            status=fr.status, reward=fr.reward, passed=fr.passed,
                            cost_usd=np.where(fr.task == 0, np.nan, fr.cost_usd),
                            input=fr.input, output=fr.output)
    card = score(fr2, ScoringSpec(tiers="stored"), budgets=table1())
    c = card.row("C")
    assert c.ams is None and c.pass_rate is None and c.tiers["easy"].sr is None
    a = card.row("A")
    assert a.tiers["hard"].n_tasks == 0 and a.tiers["hard"].score is None and a.ams is None
    assert a.tiers["easy"].sr == 0.5  # quality is still known
    assert a.tiers["easy"].cost_aubqc is None and a.usd_per_pass is None  # e1 cost unknown
    assert any("tier hard has no tasks" in n for n in card.notes)
    assert card.winners.ams == []


# --- properties ----------------------------------------------------------------------------

FIXED = BudgetSpec.model_validate({"tiers": {
    "easy": {"budgets": [0.1, 0.5], "tau": 0.3}, "medium": {"budgets": [0.2, 1.0], "tau": 0.6},
    "hard": {"budgets": [0.5, 2.0], "tau": 1.5}}})


@st.composite
def frames(draw: st.DrawFn) -> TrialFrame:
    n_c = draw(st.integers(1, 4))
    n_t = draw(st.integers(3, 9))
    cells = [(c, t) for c in range(n_c) for t in range(n_t)
             if draw(st.booleans()) or t < 3]
    status = [draw(st.sampled_from([0, 1, 2, 3, 4, 5])) for _ in cells]
    reward = [draw(st.floats(0, 1)) for _ in cells]
    cost = [draw(st.floats(0, 3)) for _ in cells]
    tiers = [("easy", "medium", "hard")[t % 3] for t in range(n_t)]
    return frame_from_arrays(
        [ConfigInfo(f"c{i}", f"c{i}", f"m{i % 2}", f"a{i}") for i in range(n_c)],
        [f"t{t}" for t in range(n_t)], tiers,
        config=np.array([c for c, _ in cells]), task=np.array([t for _, t in cells]),
        status=np.array(status),
        reward=np.where(np.array(status) == 0, 1.0, np.array(reward)),
        cost_usd=np.array(cost), input=np.array(cost) * 1e6, output=np.zeros(len(cells)),
        turns=np.ones(len(cells)), tool_calls=np.ones(len(cells)))


@given(frames())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_scores_in_unit_interval(fr: TrialFrame) -> None:
    for spec, budgets in ((ScoringSpec(tiers="stored"), FIXED), (ScoringSpec(), None)):
        card = score(fr, spec, budgets=budgets)
        for r in card.rows:
            vals = [r.ams] + [t.score for t in r.tiers.values()] + [
                t.sr for t in r.tiers.values()] + [t.efr for t in r.tiers.values()]
            for v in vals:
                assert v is None or -1e-12 <= v <= 1 + 1e-12


@given(frames(), st.data())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_raising_a_cost_never_raises_cbq_and_never_lowers_efr(fr: TrialFrame,
                                                             data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(fr) - 1))
    bump = data.draw(st.floats(0, 5))
    cost2 = fr.cost_usd.copy()
    cost2[i] += bump
    spec = ScoringSpec(tiers="stored")
    before = score(fr, spec, budgets=FIXED)
    after = score(fr.with_costs(cost2), spec, budgets=FIXED)
    for r0, r1 in zip(before.rows, after.rows, strict=True):
        for g in r0.tiers:
            t0, t1 = r0.tiers[g], r1.tiers[g]
            for c0, c1 in zip(t0.cbq, t1.cbq, strict=True):
                assert c0 is None or c1 is None or c1 <= c0 + 1e-12
            if t0.efr is not None and t1.efr is not None:
                assert t1.efr >= t0.efr - 1e-12


@given(frames(), st.randoms(use_true_random=False))
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_task_and_row_order_change_nothing(fr: TrialFrame, rnd: object) -> None:
    import random
    assert isinstance(rnd, random.Random)
    n_t = len(fr.task_ids)
    perm = list(range(n_t))
    rnd.shuffle(perm)  # new position of each old task index
    rows = list(range(len(fr)))
    rnd.shuffle(rows)
    inv = np.array(perm)
    ids = [""] * n_t
    tiers: list[str | None] = [None] * n_t
    for old, new in enumerate(perm):
        ids[new], tiers[new] = fr.task_ids[old], fr.task_tiers[old]
    r = np.array(rows)
    fr2 = frame_from_arrays(fr.configs, ids, tiers, config=fr.config[r], task=inv[fr.task[r]],
                            status=fr.status[r], reward=fr.reward[r], cost_usd=fr.cost_usd[r],
                            input=fr.input[r], output=fr.output[r], turns=fr.turns[r],
                            tool_calls=fr.tool_calls[r])
    for spec, budgets in ((ScoringSpec(tiers="stored"), FIXED), (ScoringSpec(), None)):
        a = score(fr, spec, budgets=budgets).model_dump()
        b = score(fr2, spec, budgets=budgets).model_dump()
        assert a == b or _close(a, b)


def _close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b

"""CLI-Tool-Bench funnel and AgencyBench metrics against hand-computed fixtures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmeter.metrics.agency import RoundResult, passes, summarize, task_score
from agentmeter.metrics.funnel import (
    CaseResult,
    exact_match,
    fuzzy_match,
    levenshtein,
    repository_score,
    similarity,
)
from agentmeter.metrics.funnel import summarize as summarize_funnel


def _lev_reference(a: str, b: str) -> int:
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]


@given(st.text("abc ", max_size=12), st.text("abc ", max_size=12), st.integers(0, 6))
@settings(max_examples=300)
def test_levenshtein_matches_reference(a: str, b: str, cap: int) -> None:
    d = _lev_reference(a, b)
    assert levenshtein(a, b) == d
    assert levenshtein(a, b, cap=cap) == min(d, cap + 1)
    m = max(len(a), len(b))
    assert fuzzy_match(a, b) == (m == 0 or 1 - d / m >= 0.8)


def test_match_levels_by_hand() -> None:
    assert exact_match("a b\n c\t", "abc") and not exact_match("abc", "abd")
    assert similarity("", "") == 1.0 and fuzzy_match("", "")
    long_a = "line: " + "x" * 100_000  # the band search reaches the exact distance
    assert levenshtein(long_a, long_a[:-500] + "y" * 500, cap=1000) == 500
    assert levenshtein(long_a, long_a[:-500] + "y" * 500, cap=499) == 500
    assert levenshtein("kitten", "sitting") == 3
    assert similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert fuzzy_match("abcdefghij", "abcdefghXY")  # 1 - 2/10 = 0.8 meets the threshold
    assert not fuzzy_match("abcdefghij", "abcdefgXYZ")  # 0.7


def case(cls: str, oracle: int, cand: int | None, fx: bool, out_o: str, out_c: str,
         sem: bool | None = None) -> CaseResult:
    return CaseResult(case_id=f"{cls}-{out_o}-{out_c}", command_class=cls, oracle_exit=oracle,
                      candidate_exit=cand, side_effects_equal=fx, oracle_stdout=out_o,
                      candidate_stdout=out_c, semantic_equal=sem)


def test_repository_funnel_by_hand() -> None:
    cases = [
        # class "list": 4 valid cases (+1 where the oracle failed: left out)
        case("list", 0, 0, True, "a b c", "abc"),              # exec, EM, FM, SM
        case("list", 0, 0, True, "abcdefghij", "abcdefghXY"),  # exec, FM, SM
        case("list", 0, 0, False, "x", "x"),                   # exec only (side effects differ)
        case("list", 0, 1, True, "x", "x"),                    # nothing
        case("list", 2, 2, True, "", ""),                      # oracle failed: not a case
        # class "add": 2 valid cases
        case("add", 0, 0, True, "total: 3", "sum is three", sem=True),  # exec, SM
        case("add", 0, 0, True, "total: 3", "3 apples", sem=False),     # exec
    ]
    s = repository_score(True, cases)
    assert s.n_cases == 6 and s.n_classes == 2
    # SM = comparable ∧ (EM ∨ judge): the fuzzy-only case of "list" is not SM without a verdict
    # saying so, but its variant sm_fm = comparable ∧ (FM ∨ judge) counts it
    assert s.per_class["list"] == {"exec": 0.75, "em": 0.25, "fm": 0.5, "sm": None,
                                   "sm_fm": 0.5, "sm_nogate": None}
    assert s.per_class["add"] == {"exec": 1.0, "em": 0.0, "fm": 0.0, "sm": 0.5, "sm_fm": 0.5,
                                  "sm_nogate": 0.5}
    assert s.exec == pytest.approx((0.75 + 1.0) / 2) and s.em == pytest.approx(0.125)
    assert s.fm == pytest.approx(0.25) and s.sm is None and s.sm_fm == pytest.approx(0.5)
    failed = repository_score(False, cases)
    assert (failed.build, failed.exec, failed.em, failed.fm, failed.sm) == (False, 0, 0, 0, 0)
    unjudged = repository_score(True, [case("add", 0, 0, True, "total: 3", "three")])
    assert unjudged.fm == 0.0 and unjudged.sm is None  # a needed judge verdict is missing
    summary = summarize_funnel([s, failed])
    assert summary.build == 0.5 and summary.exec == pytest.approx(0.875 / 2)
    assert summary.sm is None and summary.sm_sd is None  # n/a stays n/a


def test_sm_variants_by_hand() -> None:
    """The three SM semantics of spec §5.2 on one class of six valid cases."""
    cases = [
        case("c", 0, 0, True, "a b", "ab"),                      # EM: all three SM hold
        case("c", 0, 0, True, "abcdefghij", "abcdefghXY", sem=False),  # FM, judge says no
        case("c", 0, 0, True, "total: 3", "sum is three", sem=True),   # judge only
        case("c", 0, 0, False, "same", "same"),                  # Exec, ΔS differs, stdout equal
        case("c", 0, 0, False, "x = 1", "one", sem=True),        # Exec, ΔS differs, judge yes
        case("c", 0, 3, True, "x", "x", sem=True),               # no Exec: nothing
    ]
    s = repository_score(True, cases)
    assert s.em == pytest.approx(1 / 6) and s.fm == pytest.approx(2 / 6)
    assert s.sm == pytest.approx(2 / 6)         # comparable ∧ (EM ∨ judge): cases 1, 3
    assert s.sm_fm == pytest.approx(3 / 6)      # comparable ∧ (FM ∨ judge): cases 1, 2, 3
    assert s.sm_nogate == pytest.approx(4 / 6)  # Exec ∧ (EM ∨ judge): cases 1, 3, 4, 5
    assert s.side_effects == pytest.approx(3 / 6) and s.exec == pytest.approx(5 / 6)
    # em ≤ sm and em ≤ fm hold; fm and sm have no order (here sm < fm is possible too)
    lower = repository_score(True, [case("c", 0, 0, True, "abcdefghij", "abcdefghXY",
                                         sem=False)])
    assert lower.fm == 1.0 and lower.sm == 0.0 and lower.sm_fm == 1.0


def test_publisher_statistics_by_hand() -> None:
    """SD with n − 1 and the 90 % half-width 1.645·SD/√n of per-repository SM."""
    scores = [repository_score(True, [case("c", 0, 0, True, "a", "a")]),     # SM 1
              repository_score(True, [case("c", 0, 1, True, "a", "a")]),     # SM 0
              repository_score(False, [])]                                  # SM 0 (no build)
    s = summarize_funnel(scores)
    mean = 1 / 3
    sd = (((1 - mean) ** 2 + 2 * mean ** 2) / 2) ** 0.5
    assert s.sm == pytest.approx(mean) and s.sm_sd == pytest.approx(sd)
    assert s.sm_ci90 == pytest.approx(1.645 * sd / 3 ** 0.5)
    assert summarize_funnel(scores[:1]).sm_sd is None  # one repository: no SD


def test_agency_metrics_by_hand() -> None:
    assert task_score(6, 10) == 6.0 and passes(6.0) and not passes(5.9)
    rounds = [
        # scenario s1: t1 passes in round 1 (8/10); t2 passes in round 2 (3/10 then 7/10)
        RoundResult(scenario="s1", task="t1", round=1, rubric_satisfied=8, rubric_total=10,
                    tokens=100),
        RoundResult(scenario="s1", task="t2", round=1, rubric_satisfied=3, rubric_total=10,
                    tokens=200),
        RoundResult(scenario="s1", task="t2", round=2, rubric_satisfied=7, rubric_total=10,
                    tokens=300),
        # scenario s2: t3 fails both rounds (2/5 then 2/4)
        RoundResult(scenario="s2", task="t3", round=1, rubric_satisfied=2, rubric_total=5,
                    tokens=400),
        RoundResult(scenario="s2", task="t3", round=2, rubric_satisfied=2, rubric_total=4,
                    tokens=500),
    ]
    s = summarize(rounds)
    s_avg = 10 * (8 + 7 + 5) / 3  # final scores 8, 7, 5 out of 10, as percent
    assert s.s_avg == pytest.approx(s_avg)
    assert s.att == pytest.approx((1 + 2 + 2) / 3)
    assert s.pass_at == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3)}
    assert s.rise == pytest.approx(100.0)
    tok = (100 + 200 + 300 + 400 + 500) / 2
    assert s.tokens_per_scenario == pytest.approx(tok)
    assert s.e_att == pytest.approx(s_avg / (5 / 3)) and s.e_tok == pytest.approx(s_avg / tok)
    no_tokens = summarize([RoundResult(scenario="s", task="t", round=1, rubric_satisfied=1,
                                       rubric_total=1)])
    assert no_tokens.e_tok is None and no_tokens.rise == 0.0
    never = summarize([RoundResult(scenario="s", task="t", round=r, rubric_satisfied=0,
                                   rubric_total=3, tokens=1) for r in (1, 2)])
    assert never.rise is None and never.s_avg == 0.0 and never.att == 2.0


def test_variant_reward_keys_are_read_and_shown() -> None:
    """``<class>.sm_fm`` / ``<class>.sm_nogate`` are named variants beside the levels: parsed,
    macro-averaged, shown as their own columns of ``score --metric funnel``."""
    from rich.console import Console

    from agentmeter.metrics.from_store import FunnelReport, FunnelRow, funnel_rates
    from agentmeter.metrics.funnel import score_from_rates
    from agentmeter.report.benchmark_tables import funnel_table

    parsed = funnel_rates({"build": 1.0, "c01.exec": 1.0, "c01.em": 0.5, "c01.fm": 0.75,
                           "c01.sm": 0.5, "c01.sm_fm": 0.75, "c01.sm_nogate": 1.0,
                           "c02.exec": 1.0, "c02.em": 0.0, "c02.fm": 0.0, "c02.sm": 0.25,
                           "c02.sm_fm": 0.25, "c02.sm_nogate": 0.5, "c02.bogus": 7.0})
    assert parsed is not None
    s = score_from_rates(*parsed)
    assert (s.sm, s.sm_fm, s.sm_nogate) == pytest.approx((0.375, 0.5, 0.75))
    assert s.per_class["c02"]["sm_nogate"] == 0.5
    with pytest.raises(ValueError, match="c01.sm_fm = 1.5"):
        funnel_rates({"c01.sm_fm": 1.5})
    other = score_from_rates(True, {"c": {"exec": 1.0, "em": 1.0, "fm": 1.0, "sm": 1.0}})
    summary = summarize_funnel([s, other])
    assert summary.sm_fm is None  # a repository without the variant: n/a, never 0
    report = FunnelReport(tasks=["t1"], n_other_tasks=0, rows=[FunnelRow(
        config_id="A", label="codex × m", model="m", summary=summarize_funnel([s, s]),
        n_without_results=0)])
    console = Console(width=300, record=True)
    console.print(funnel_table(report, "funnel"))
    text = console.export_text()
    assert "SM (FM∨judge)" in text and "SM (no ΔS gate)" in text and "75.0%" in text
    assert "SM SD" in text and "0.000" in text and "±0.0%" in text


def test_fuzzy_match_shortcuts_agree_with_the_distance() -> None:
    """The narrow band, the byte-histogram bound and the line-aligned bound only shortcut: the
    verdict is the one of the exact similarity, for ASCII and multi-byte text alike."""
    base = "".join(f"row {i}: value {i * 7 % 13}\n" for i in range(3000))
    variants = [base.replace("row 17:", "ROW 17:"), base.upper(), base[::-1],
                base.replace("e", "é"), "".join("Z" if i % 9 == 0 else c
                                                  for i, c in enumerate(base)),
                "".join("Z" if i % 5 == 0 else c for i, c in enumerate(base)),  # near the bound
                "".join("Z" if i % 4 == 0 else c for i, c in enumerate(base)),  # past it
                base[: len(base) * 85 // 100], base + "x" * 2000]
    for other in variants:
        assert fuzzy_match(base, other) == (similarity(base, other) >= 0.8)

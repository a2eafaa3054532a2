"""The CLI-Tool-Bench funnel and the AgencyBench metrics from real SQLite stores written through
the Store API, end to end through ``agentmeter score --metric funnel|agency|all``. Expected
figures are computed in the tests from the definitions (docs/metrics.md)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_metrics_store import populate
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.metrics.from_store import agency_report, funnel_report
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
from agentmeter.store.queries import selected_trials

S = TrialStatus
T0 = datetime(2026, 6, 4, tzinfo=UTC)
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _setup(store: Store, run: str, tasks: dict[str, str | None], created: datetime = T0) -> None:
    store.create_run(RunRecord(id=run, created_at=created, status="finished"))
    for cid, agent in (("A", "codex"), ("B", "native")):
        store.upsert_config(ConfigRecord(id=cid, label=f"{agent} × M",
                                         model=ModelSpec(name="M", price_key="scripted/solver"),
                                         agent=AgentSpec(name=agent)), run)
    for tid, category in tasks.items():
        store.upsert_task(TaskRecord(id=tid, digest="d1", category=category), run)


def _trial(run: str, cfg: str, task: str, status: TrialStatus = S.PASSED, *, attempt: int = 0,
           try_number: int = 0, reward: float | None = None, rewards: dict[str, float] | None = None,
           tokens: tuple[int | None, int | None] = (None, None), cost: float | None = None,
           turns: int | None = None, tools: dict[str, int] | None = None,
           extra: dict[str, Any] | None = None) -> TrialRecord:
    passed = None if status is S.INFRA_INVALID else (
        reward >= 0.6 if reward is not None else status is S.PASSED)
    return TrialRecord(id=f"{cfg}:{task}:{attempt}", run_id=run, config_id=cfg, task_id=task,
                       attempt=attempt, try_number=try_number, status=status, reward=reward,
                       rewards=rewards or {}, passed=passed,
                       usage=TokenUsage(input=tokens[0], output=tokens[1]), cost_usd=cost,
                       model_calls=1, turns=turns, tool_calls=tools or {}, extra=extra or {})


# --- funnel --------------------------------------------------------------------------------

A_CLI1 = {"build": 1.0, "reward": 0.5,
          "list.exec": 1.0, "list.side_effects": 0.75, "list.em": 0.5, "list.fm": 0.75,
          "list.sm": 1.0, "list.cases": 4,
          "add.exec": 0.5, "add.side_effects": 0.5, "add.em": 0.0, "add.fm": 0.5, "add.sm": 0.5,
          "add.cases": 2}
B_CLI2 = {"build": 1.0, "reward": 1.0, "x.exec": 1.0, "x.side_effects": 1.0, "x.em": 1.0,
          "x.fm": 1.0}  # no judge verdicts: SM n/a


def funnel_store(root: Path) -> Store:
    store = Store.open(root)
    _setup(store, "f1", {"cli1": None, "cli2": None, "plain": None})
    for t in [
        # A cli1: an infra try with garbage, then the real result (the latest try is selected)
        _trial("f1", "A", "cli1", S.INFRA_INVALID, rewards={"build": 0.0}, cost=9.0),
        _trial("f1", "A", "cli1", S.FAILED, try_number=1, reward=0.5, rewards=A_CLI1,
               tokens=(2000, 500), cost=0.02, turns=10),
        # A cli2: the build failed; class rates left behind must not count
        _trial("f1", "A", "cli2", S.FAILED, reward=0.0,
               rewards={"build": 0.0, "reward": 0.0, "y.exec": 1.0, "y.em": 1.0},
               tokens=(4000, 1500), cost=0.04, turns=20),
        # B cli1: timed out before the verifier wrote anything -> a failed build
        _trial("f1", "B", "cli1", S.TIMEOUT, tokens=(100, 10), cost=0.01, turns=5),
        _trial("f1", "B", "cli2", S.PASSED, reward=1.0, rewards=B_CLI2, tokens=(300, 30),
               cost=0.03, turns=7),
        # an ordinary task: not part of the funnel
        _trial("f1", "A", "plain", reward=1.0, rewards={"reward": 1.0}, tokens=(1, 1), cost=0.0,
               turns=1),
        _trial("f1", "B", "plain", reward=1.0, tokens=(1, 1), cost=0.0, turns=1),
    ]:
        store.save_trial(t)
    return store


def test_funnel_from_stored_rewards_by_hand(tmp_path: Path) -> None:
    with funnel_store(tmp_path) as store:
        report = funnel_report(selected_trials(store, ["f1"]))
    assert report.tasks == ["cli1", "cli2"] and report.n_other_tasks == 1
    rows = {r.config_id: r for r in report.rows}
    a, b = rows["A"].summary, rows["B"].summary
    assert a is not None and b is not None
    # A: repository cli1 macro-averages its two classes; cli2's build failed -> all zero
    cli1 = {"exec": (1.0 + 0.5) / 2, "side_effects": (0.75 + 0.5) / 2, "em": (0.5 + 0.0) / 2,
            "fm": (0.75 + 0.5) / 2, "sm": (1.0 + 0.5) / 2}
    assert a.n == 2 and a.build == pytest.approx(0.5)
    for level, value in cli1.items():
        assert getattr(a, level) == pytest.approx((value + 0.0) / 2), level
    assert rows["A"].n_without_results == 0
    assert rows["A"].steps_per_repo == pytest.approx((10 + 20) / 2)
    assert rows["A"].prompt_ktok_per_repo == pytest.approx((2.0 + 4.0) / 2)
    assert rows["A"].completion_ktok_per_repo == pytest.approx((0.5 + 1.5) / 2)
    assert rows["A"].usd_per_repo == pytest.approx((0.02 + 0.04) / 2)  # the infra try is not
    # B: the timed-out trial is a failed build; cli2 has no SM verdicts -> SM n/a
    assert rows["B"].n_without_results == 1
    assert (b.build, b.exec, b.side_effects, b.em, b.fm) == pytest.approx(
        (0.5, 0.5, 0.5, 0.5, 0.5))
    assert b.sm is None
    assert any("not part of the funnel" in n for n in report.notes)
    assert any("counted as failed builds" in n for n in report.notes)


def test_score_funnel_cli_json_and_table(tmp_path: Path) -> None:
    funnel_store(tmp_path).close()
    code, out, err = cli("score", "f1", "--store", str(tmp_path), "--metric", "funnel",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"runs", "subset", "funnel"}
    rows = {r["config_id"]: r for r in data["funnel"]["rows"]}
    assert rows["A"]["summary"]["em"] == pytest.approx(0.25 / 2)
    assert rows["B"]["summary"]["sm"] is None
    # --metric all adds the funnel (the run has funnel keys) but not AgencyBench (no task
    # categories, no recorded rounds)
    code, out, err = cli("score", "f1", "--store", str(tmp_path), "--metric", "all",
                         "--tiers", "stored", "--budgets", "table1", "--json")
    assert code == 0, err
    assert set(json.loads(out)) == {"runs", "subset", "scorecard", "pass_k", "allocation",
                                    "funnel"}
    code, out, err = cli("score", "f1", "--store", str(tmp_path), "--metric", "funnel")
    assert code == 0, err
    assert "CLI-Tool-Bench funnel" in out and "Side effects" in out and "n/a" in out


def test_funnel_breakdowns_by_language_difficulty_and_domain(tmp_path: Path) -> None:
    """Tasks state language (a ``language:X`` tag), difficulty (tier) and domain (category);
    each group's summary is the mean over its repositories, computed here by hand."""
    with funnel_store(tmp_path) as store:
        store.upsert_task(TaskRecord(id="cli1", digest="d1", tier="easy", category="text",
                                     tags=["language:Python", "cli"]), "f1")
        store.upsert_task(TaskRecord(id="cli2", digest="d1", tier="hard", category="text",
                                     tags=["language:go"]), "f1")
        report = funnel_report(selected_trials(store, ["f1"]))
    rows = {r.config_id: r.breakdowns for r in report.rows}
    a_cli1_fm = (0.75 + 0.5) / 2  # A's cli1 macro FM; A's cli2 build failed (all zero)
    a = rows["A"]
    assert set(a) == {"language", "difficulty", "domain"}
    assert (a["language"]["python"].n, a["language"]["python"].build) == (1, 1.0)
    assert a["language"]["python"].fm == pytest.approx(a_cli1_fm)
    assert (a["language"]["go"].build, a["language"]["go"].fm) == (0.0, 0.0)
    assert a["difficulty"]["easy"] == a["language"]["python"]
    assert a["domain"]["text"].n == 2 and a["domain"]["text"].fm == pytest.approx(a_cli1_fm / 2)
    b = rows["B"]  # cli1 left no results (a failed build), cli2 passed every class
    assert (b["language"]["python"].build, b["language"]["go"].fm) == (0.0, 1.0)
    code, out, err = cli("score", "f1", "--store", str(tmp_path), "--metric", "funnel")
    assert code == 0, err
    assert "funnel by language" in out and "funnel by difficulty" in out and "funnel by domain" in out
    assert "75.0% / 62.5% (1)" in out  # A on python: SM / FM (repos)


def test_no_differential_testing_results(tmp_path: Path) -> None:
    populate(tmp_path).close()
    code, out, err = cli("score", "r1", "--store", str(tmp_path), "--metric", "funnel")
    assert code == 0, err
    assert "no differential-testing results in this run" in out and "n/a" in out
    code, out, err = cli("score", "r1", "--store", str(tmp_path), "--metric", "funnel",
                         "--json")
    assert code == 0, err
    fun = json.loads(out)["funnel"]
    assert fun["tasks"] == [] and all(r["summary"] is None for r in fun["rows"])
    assert "no differential-testing results" in fun["notes"][0]


def test_bad_funnel_values_are_left_out_with_a_note(tmp_path: Path) -> None:
    good = {"build": 1.0, "reward": 1.0, "c.exec": 1.0, "c.side_effects": 1.0, "c.em": 1.0,
            "c.fm": 1.0, "c.sm": 1.0}
    with Store.open(tmp_path) as store:
        _setup(store, "f1", {"cli1": None, "cli2": None})
        store.save_trial(_trial("f1", "A", "cli1", S.FAILED, reward=0.5,
                                rewards={"build": 1.0, "reward": 0.5, "list.exec": 1.5}))
        store.save_trial(_trial("f1", "B", "cli2", S.FAILED, reward=0.5,
                                rewards={"build": 0.5, "reward": 0.5}))
        store.save_trial(_trial("f1", "A", "cli2", reward=1.0, rewards=good))
        store.save_trial(_trial("f1", "B", "cli1", reward=1.0, rewards=good))
        report = funnel_report(selected_trials(store, ["f1"]))
    assert report.tasks == ["cli1", "cli2"]
    assert any("list.exec = 1.5" in n for n in report.notes)
    assert any("build = 0.5" in n for n in report.notes)
    for row in report.rows:  # the unreadable trial is left out, not counted as a failed build
        assert row.summary is not None and row.summary.n == 1 and row.n_without_results == 0
        assert row.summary.build == 1.0 and row.summary.sm == 1.0


# --- AgencyBench ---------------------------------------------------------------------------

def agency_store(root: Path) -> Store:
    store = Store.open(root)
    _setup(store, "a1", {"g1": "game", "g2": "game", "w1": "web"})
    s1 = {"scenario": "s1"}
    for t in [
        # A g1: passes at once (8/10); the later attempt does not count (rounds stop at a pass)
        _trial("a1", "A", "g1", reward=0.8, tokens=(100, 20), turns=4,
               tools={"bash": 3, "write_file": 1}, extra=s1),
        _trial("a1", "A", "g1", S.FAILED, attempt=1, reward=0.3, tokens=(900, 99), turns=50,
               tools={"bash": 40}, extra=s1),
        # A g2: 3/10 then 7/10 -> passes in round 2
        _trial("a1", "A", "g2", S.FAILED, reward=0.3, tokens=(150, 50), turns=5,
               tools={"bash": 2}, extra=s1),
        _trial("a1", "A", "g2", attempt=1, reward=0.7, tokens=(250, 50), turns=6,
               tools={"replace": 2}, extra=s1),
        # A w1: an infra attempt (not a round), then 2/10 and 5/10 -> fails after 2 rounds
        _trial("a1", "A", "w1", S.INFRA_INVALID, tokens=(5000, 0), turns=1, tools={"bash": 9}),
        _trial("a1", "A", "w1", S.FAILED, attempt=1, reward=0.2, tokens=(300, 100), turns=3,
               tools={"web_search": 1}),
        _trial("a1", "A", "w1", S.FAILED, attempt=2, reward=0.5, tokens=(400, 100), turns=2,
               tools={"web_search": 1, "bash": 1}),
        # B: g1 timed out without a reward (score 0); g2 passed with no reward (score 10);
        # w1 only infra_invalid; no token counts exposed
        _trial("a1", "B", "g1", S.TIMEOUT, turns=9, tools={"bash": 5}, extra=s1),
        _trial("a1", "B", "g2", S.PASSED, turns=1, tools={"bash": 1}, extra=s1),
        _trial("a1", "B", "w1", S.INFRA_INVALID),
    ]:
        store.save_trial(t)
    return store


def test_agency_from_attempts_by_hand(tmp_path: Path) -> None:
    with agency_store(tmp_path) as store:
        report = agency_report(selected_trials(store, ["a1"]))
    assert report.rounds_source == "attempts" and report.ks == [1, 2]
    rows = {r.config_id: r for r in report.rows}
    a = rows["A"].summary
    assert a is not None
    finals = [8.0, 7.0, 5.0]  # g1 round 1, g2 round 2, w1 last round
    rounds = [1, 2, 2]
    s_avg = 10 * sum(finals) / 3
    att = sum(rounds) / 3
    assert (a.n_tasks, a.n_scenarios) == (3, 2)  # g1+g2 share scenario s1; w1 is its own
    assert a.s_avg == pytest.approx(s_avg) and a.att == pytest.approx(att)
    assert a.pass_at[1] == pytest.approx(1 / 3) and a.pass_at[2] == pytest.approx(2 / 3)
    assert a.rise == pytest.approx(100 * (2 / 3 - 1 / 3) / (1 / 3))
    tok = ((100 + 20) + (150 + 50) + (250 + 50) + (300 + 100) + (400 + 100)) / 2
    assert a.tokens_per_scenario == pytest.approx(tok)
    assert a.e_att == pytest.approx(s_avg / att)
    assert a.e_tok_m == pytest.approx(s_avg / (tok / 1e6))
    assert rows["A"].by_category == {"game": pytest.approx(10 * (8 + 7) / 2),
                                     "web": pytest.approx(50.0)}
    assert rows["A"].tools == {"bash": 3 + 2 + 1, "web_search": 2, "replace": 2,
                               "write_file": 1}
    assert rows["A"].turns_per_task == pytest.approx((4 + 5 + 6 + 3 + 2) / 3)
    assert rows["A"].n_infra_only == 0
    b = rows["B"].summary
    assert b is not None and rows["B"].n_infra_only == 1
    assert b.s_avg == pytest.approx(10 * (0 + 10) / 2) and b.att == 1.0
    assert b.pass_at[1] == pytest.approx(0.5)
    assert b.pass_at[2] is None  # g1 failed after 1 round: unknown within 2
    assert b.rise is None and b.tokens_per_scenario is None and b.e_tok_m is None
    assert rows["B"].by_category == {"game": pytest.approx(50.0)}


def test_agency_from_recorded_rounds(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        _setup(store, "a1", {"t1": None, "t2": None, "t3": None})
        store.save_trial(_trial("a1", "A", "t1", reward=0.9,
                                rewards={"reward": 0.9, "rounds": 2}, tokens=(600, 400)))
        store.save_trial(_trial("a1", "A", "t2", S.FAILED, reward=0.4,
                                extra={"rounds": 3}, tokens=(1000, 0)))
        store.save_trial(_trial("a1", "B", "t3", reward=1.0, extra={"rounds": 0.5}))
        report = agency_report(selected_trials(store, ["a1"]))
    assert report.rounds_source == "mixed"  # B's bad count fell back to attempts
    assert any("rounds = 0.5" in n for n in report.notes)
    a = report.rows[0].summary
    assert a is not None
    assert a.s_avg == pytest.approx(10 * (9 + 4) / 2) and a.att == pytest.approx((2 + 3) / 2)
    assert a.pass_at == {1: 0.0, 2: pytest.approx(0.5)}  # t1 passed in round 2
    assert a.rise is None  # Pass@1 = 0: no relative rise
    assert a.tokens_per_scenario == pytest.approx((1000 + 1000) / 2)


def test_agency_several_runs_and_cli(tmp_path: Path) -> None:
    with agency_store(tmp_path) as store:
        # a later run redoes B's g1 (passes now): it replaces the earlier attempt 0
        _setup(store, "a2", {"g1": "game"}, created=T0 + timedelta(days=1))
        store.save_trial(_trial("a2", "B", "g1", reward=0.6, extra={"scenario": "s1"}))
    code, out, err = cli("score", "a1", "a2", "--store", str(tmp_path), "--metric", "agency",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"runs", "subset", "agency"}
    b = next(r for r in data["agency"]["rows"] if r["config_id"] == "B")
    assert b["summary"]["s_avg"] == pytest.approx(10 * (6 + 10) / 2)
    assert b["summary"]["pass_at"] == {"1": 1.0, "2": 1.0}
    # the run has task categories: --metric all includes AgencyBench, not the funnel
    code, out, err = cli("score", "a1", "--store", str(tmp_path), "--metric", "all",
                         "--tiers", "stored", "--budgets", "table1", "--json")
    assert code == 0, err
    assert "agency" in json.loads(out) and "funnel" not in json.loads(out)
    code, out, err = cli("score", "a1", "--store", str(tmp_path), "--metric", "agency")
    assert code == 0, err
    assert "AgencyBench metrics" in out and "S_avg per capability" in out
    assert "tool invocations" in out and "web_search" in out


def test_bootstrap_intervals_for_funnel_agency_and_passk(tmp_path: Path) -> None:
    """CIs over tasks (repositories) for the figures beyond AMS: each contains its point value,
    is reproducible for the seed, and is absent where the figure is n/a."""
    from agentmeter.metrics import load_frame, pass_k_by_config
    from agentmeter.metrics.uncertainty import mean_interval

    assert mean_interval([0.5, 0.5, 0.5], 200) == (0.5, 0.5)
    assert mean_interval([0.0, 1.0] * 10, 500) == mean_interval([0.0, 1.0] * 10, 500)
    lo, hi = mean_interval([0.0, 1.0] * 10, 2000) or (0, 0)
    assert 0.2 <= lo < 0.5 < hi <= 0.8  # ≈ 0.5 ± 1.96·0.5/√20 = [0.28, 0.72], on a grid of 0.05
    assert mean_interval([1.0], 100) is None and mean_interval([1.0, math.nan], 100) is None
    with funnel_store(tmp_path) as store:
        data = selected_trials(store, ["f1"])
        fun = {r.config_id: r for r in funnel_report(data, resamples=300).rows}
        ag = {r.config_id: r for r in agency_report(data, resamples=300).rows}
        pk = pass_k_by_config(load_frame(store, ["f1"]), 1, resamples=300)
    a = fun["A"]
    assert a.summary is not None and {"build", "exec", "em", "fm", "sm"} <= set(a.ci)
    for level, ci in a.ci.items():
        assert ci.low <= getattr(a.summary, level) <= ci.high, level
    assert "sm" not in fun["B"].ci  # SM is n/a for B: no interval either
    for row in ag.values():
        assert row.summary is not None and "s_avg" in row.ci
        assert row.ci["s_avg"].low <= row.summary.s_avg <= row.ci["s_avg"].high
    for p in pk:
        assert p.pass_at_k is not None and p.ci["pass_at_k"].low <= p.pass_at_k <= p.ci["pass_at_k"].high
    assert funnel_report(data).rows[0].ci == {}  # no resamples asked: none computed

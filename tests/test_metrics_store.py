"""Scoring straight from a real SQLite store: latest-completed-try selection, infra_invalid
contributing zero to quality (or excluded, on request) but kept in spending, unfinished tries
ignored, several runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agentmeter.metrics import ScoringSpec, load_frame, score, selected_mask, table1
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
from agentmeter.store.db import Store, StoreError

S = TrialStatus
TASKS = {"e1": "easy", "e2": "easy", "m1": "medium", "m2": "medium", "h1": "hard", "h2": "hard"}
T0 = datetime(2026, 6, 4, tzinfo=UTC)


def _trial(run: str, cfg: str, task: str, status: TrialStatus, cost: float | None, tokens: int,
           try_number: int = 0, reward: float | None = None, attempt: int = 0,
           tools: dict[str, int] | None = None) -> TrialRecord:
    passed = None if not status.final or status is S.INFRA_INVALID else status is S.PASSED
    if reward is None and passed is not None:
        reward = 1.0 if passed else 0.0
    return TrialRecord(id=f"{cfg}:{task}:{attempt}", run_id=run, config_id=cfg, task_id=task,
                       attempt=attempt, try_number=try_number, status=status, reward=reward,
                       passed=passed, usage=TokenUsage(input=tokens, output=0), cost_usd=cost,
                       model_calls=3, turns=3, tool_calls=tools or {"bash": 2, "read": 1})


def populate(root: Path) -> Store:
    store = Store.open(root)
    store.create_run(RunRecord(id="r1", created_at=T0, status="finished"))
    for cid, agent in (("A", "x"), ("B", "y")):
        store.upsert_config(ConfigRecord(id=cid, label=f"M x {agent}",
                                         model=ModelSpec(name="M", price_key="scripted/solver"),
                                         agent=AgentSpec(name=agent)), "r1")
    for tid, tier in TASKS.items():
        store.upsert_task(TaskRecord(id=tid, digest="d1", tier=tier), "r1")  # type: ignore[arg-type]
    for t in [
        _trial("r1", "A", "e1", S.PASSED, 0.05, 100),
        _trial("r1", "A", "e2", S.FAILED, 0.20, 400),
        _trial("r1", "A", "m1", S.FAILED, 0.50, 900, reward=0.5),
        _trial("r1", "A", "m2", S.PASSED, 0.02, 50),
        _trial("r1", "A", "h1", S.INFRA_INVALID, 5.0, 7000),
        _trial("r1", "A", "h2", S.INFRA_INVALID, 0.30, 1000, try_number=0),
        _trial("r1", "A", "h2", S.PASSED, 1.00, 3000, try_number=1),
        _trial("r1", "A", "h2", S.RUNNING, None, 0, try_number=2),  # unfinished: ignored
        *(_trial("r1", "B", t, S.FAILED, 0.01, 10) for t in ("e1", "e2", "m1", "m2")),
        _trial("r1", "B", "h1", S.PASSED, 0.01, 10),
    ]:
        store.save_trial(t)
    return store


def test_score_from_store_matches_hand_values(tmp_path: Path) -> None:
    with populate(tmp_path) as store:
        frame = load_frame(store, "r1")
    assert frame.task_ids == sorted(TASKS) and [c.id for c in frame.configs] == ["A", "B"]
    assert len(frame) == 12 and any("unfinished" in n for n in frame.notes)
    assert set(frame.tool_calls.tolist()) == {3.0}  # JSON tool-call counts summed in SQL
    sel = selected_mask(frame)
    h2 = (frame.config == 0) & (frame.task == frame.task_ids.index("h2"))
    assert sel[h2].tolist() == [False, True] or sel[h2].tolist() == [True, False]
    assert frame.status[h2 & sel][0] == 0  # the passed try 1 is selected
    card = score(frame, ScoringSpec(tiers="stored"), budgets=table1())
    a, b = card.row("A"), card.row("B")
    assert a.tiers["easy"].score == pytest.approx(0.21)
    assert a.tiers["medium"].score == pytest.approx(0.345)
    # the paper's reading (default): h1 infra_invalid stays in |T_hard| = 2 and contributes
    # zero: SR .5, CBQ [0,0,0,.5,.5] -> .2, EFR 0 -> (.6·.5 + .4·.2)·1 = .38
    assert a.tiers["hard"].n_counted == 2 and a.tiers["hard"].score == pytest.approx(0.38)
    assert a.ams == pytest.approx((0.21 + 0.345 + 0.38) / 3)
    # --infra-invalid exclude: h1 leaves the denominator -> SR 1, CBQ [0,0,0,1,1] -> .76
    excl = score(frame, ScoringSpec(tiers="stored", infra_invalid="exclude"), budgets=table1())
    assert excl.row("A").tiers["hard"].n_counted == 1
    assert excl.row("A").ams == pytest.approx((0.21 + 0.345 + 0.76) / 3)
    assert a.n_infra_invalid == 1 and a.passes == 3
    assert a.usd == pytest.approx(7.07) and a.usd_per_pass == pytest.approx(7.07 / 3)
    assert b.n_missing == 1 and b.ams == pytest.approx((0.6 * 0.5 + 0.4 * 0.5) / 3)
    assert card.winners.ams == ["A"]


def test_reprice_from_store_usage(tmp_path: Path) -> None:
    from agentmeter.pricing import PriceBook

    with populate(tmp_path) as store:
        frame = load_frame(store, "r1")
    card = score(frame, ScoringSpec(tiers="stored", reprice=True),
                 prices=PriceBook(use_genai_prices=False), budgets=table1())
    # scripted FAKE price: 1 USD per million input tokens
    tokens_a = 100 + 400 + 900 + 50 + 7000 + 1000 + 3000
    assert card.row("A").usd == pytest.approx(tokens_a / 1e6)
    assert any("FAKE" in n for n in card.notes)


def test_several_runs_latest_run_wins(tmp_path: Path) -> None:
    with populate(tmp_path) as store:
        store.create_run(RunRecord(id="r2", created_at=T0 + timedelta(days=1), status="finished"))
        store.upsert_config(ConfigRecord(id="A", label="M x x",
                                         model=ModelSpec(name="M", price_key="scripted/solver"),
                                         agent=AgentSpec(name="x")), "r2")
        store.upsert_task(TaskRecord(id="e2", digest="d1", tier="easy"), "r2")
        store.save_trial(_trial("r2", "A", "e2", S.PASSED, 0.03, 60))
        frame = load_frame(store, ["r1", "r2"])
        with pytest.raises(StoreError, match="no run 'nope'"):
            load_frame(store, ["r1", "nope"])
    card = score(frame, ScoringSpec(tiers="stored"), budgets=table1())
    e = card.row("A").tiers["easy"]
    assert e.passes == 2 and e.sr == 1.0 and e.efr == 0.0
    # the earlier run's e2 try is still spending
    assert card.row("A").usd == pytest.approx(7.07 + 0.03)
    assert np.count_nonzero(frame.config == 0) == 8


def test_calibrated_scoring_from_store(tmp_path: Path) -> None:
    with populate(tmp_path) as store:
        frame = load_frame(store, "r1")
    card = score(frame, ScoringSpec(resamples=100))
    assert card.tier_source == "calibration" and sum(t.n_tasks for t in card.tiers) == 6
    assert card.bootstrap is not None
    for r in card.rows:
        assert r.ams is None or 0 <= r.ams <= 1


def test_repeated_reads_summarised_per_configuration(tmp_path: Path) -> None:
    """The runner's per-trial repeated-read counts, summed over each configuration's selected
    trials (the retried infra try of A h2 is not the selected one; B recorded none)."""
    with populate(tmp_path) as store:
        for task, n, try_number, status, cost in (
                ("e1", 3, 0, S.PASSED, 0.05), ("e2", 0, 0, S.FAILED, 0.20),
                ("m1", 7, 0, S.FAILED, 0.50), ("h2", 100, 0, S.INFRA_INVALID, 0.30),
                ("h2", 2, 1, S.PASSED, 1.00)):
            t = _trial("r1", "A", task, status, cost, 10, try_number=try_number)
            t.extra["trajectory"] = {"files_read": n + 1, "distinct_files_read": 1,
                                     "repeated_reads": n}
            store.save_trial(t)
        frame = load_frame(store, "r1")
    card = score(frame, ScoringSpec(tiers="stored"), budgets=table1())
    rr = card.row("A").repeated_reads
    # selected: e1 3, e2 0, m1 7, h2 2 (try 1, not the infra try's 100); m2, h1 not recorded
    assert rr is not None and rr.trajectories == 4 and rr.not_recorded == 2
    assert rr.total == 12 and rr.mean == 3.0 and rr.max == 7 and rr.with_repeats == 3
    b = card.row("B").repeated_reads
    assert b is not None and b.trajectories == 0 and b.mean is None and b.not_recorded == 5
    assert card.model_dump(mode="json")["rows"][0]["repeated_reads"]["total"] == 12

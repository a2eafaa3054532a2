"""The store's read API (store/queries.py, store/browse.py) and the rules it is the home of:
the selection rule across runs (SQL for records, the same order on columns), the latest task
versions, the leaderboard order, and the one terminal leaderboard ``score`` and ``report``
print. Real SQLite stores; expected values are worked out by hand in the tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_report_store import populate_grid
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.metrics import load_frame, selected_mask
from agentmeter.metrics.scorecard import ConfigRow, Scorecard, Winners
from agentmeter.records import (
    AgentSpec,
    ArtifactRecord,
    ConfigRecord,
    ModelSpec,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
    is_scripted,
)
from agentmeter.store import browse, queries
from agentmeter.store.db import Store, StoreError

S = TrialStatus
T0 = datetime(2026, 7, 1, tzinfo=UTC)


def _try(run: str, task: str, attempt: int, try_number: int, status: TrialStatus,
         tokens: int = 10) -> TrialRecord:
    return TrialRecord(id=f"C:{task}:{attempt}", run_id=run, config_id="C", task_id=task,
                       attempt=attempt, try_number=try_number, status=status,
                       usage=TokenUsage(input=tokens, output=1), tool_calls={"bash": 2})


@pytest.fixture
def three_runs(tmp_path: Path) -> Store:
    """Runs 'z' (oldest), 'a', 'm' (newest): ids sort differently from creation order."""
    store = Store.open(tmp_path)
    cfg = ConfigRecord(id="C", label="agent x M", model=ModelSpec(name="M"),
                       agent=AgentSpec(name="agent"))
    for k, (run, tier) in enumerate((("z", "easy"), ("a", "hard"), ("m", "hard"))):
        store.create_run(RunRecord(id=run, created_at=T0 + timedelta(days=k), status="finished"))
        store.upsert_config(cfg, run)
        for task in ("t1", "t2", "t3"):
            store.upsert_task(TaskRecord(id=task, digest=f"{run}-{task}", tier=tier,  # type: ignore[arg-type]
                                         category=run), run)
    for t in [
        # t1: done in every run; the newest run's latest completed try counts
        _try("z", "t1", 0, 0, S.PASSED, 1), _try("a", "t1", 0, 0, S.FAILED, 2),
        _try("m", "t1", 0, 0, S.INFRA_INVALID, 3), _try("m", "t1", 0, 1, S.FAILED, 4),
        _try("m", "t1", 0, 2, S.RUNNING, 5),  # not completed: never selected
        # t2: the newest run has only an unfinished try: the older run's completed one counts
        _try("a", "t2", 0, 0, S.INFRA_INVALID, 6), _try("a", "t2", 0, 3, S.PASSED, 7),
        _try("m", "t2", 0, 0, S.PENDING, 8),
        # t3: two attempts in the oldest run, each selected on its own
        _try("z", "t3", 0, 0, S.FAILED, 9), _try("z", "t3", 1, 0, S.PASSED, 10),
    ]:
        store.save_trial(t)
    return store


def test_require_runs_oldest_first_and_names_every_unknown(three_runs: Store) -> None:
    assert [r.id for r in queries.require_runs(three_runs, ["m", "z", "a"])] == ["z", "a", "m"]
    with pytest.raises(StoreError, match=r"no run 'x', 'y' in "):
        queries.require_runs(three_runs, ["x", "a", "y"])


def test_selection_rule_across_runs(three_runs: Store) -> None:
    data = queries.selected_trials(three_runs, ["m", "a", "z"])
    got = [(t.task_id, t.attempt, t.run_id, t.try_number, t.status) for t in data.selected]
    assert got == [("t1", 0, "m", 1, S.FAILED), ("t2", 0, "a", 3, S.PASSED),
                   ("t3", 0, "z", 0, S.FAILED), ("t3", 1, "z", 0, S.PASSED)]
    assert [c.id for c in data.configs] == ["C"]
    # per run, the Store's own reader applies the same rule
    assert [(t.task_id, t.try_number) for t in three_runs.latest_completed_trials("a")] == [
        ("t1", 0), ("t2", 3)]
    assert three_runs.latest_completed_trials("nope") == []
    only = queries.selected_trials(three_runs, ["z", "a", "m"], task_ids={"t2"})
    assert [(t.task_id, t.run_id) for t in only.selected] == [("t2", "a")]
    # the columns the metrics load carry the same order: selected_mask picks the same tries
    frame = load_frame(three_runs, ["a", "m", "z"])
    sel = selected_mask(frame)
    tokens = sorted(frame.input[sel].tolist())
    assert tokens == sorted(float(t.usage.input or 0) for t in data.selected) == [4, 7, 9, 10]
    assert frame.tool_calls.tolist() == [2.0] * len(frame)
    assert any("2 unfinished try(s)" in n for n in frame.notes)


def test_latest_task_versions_and_tier_changes(three_runs: Store) -> None:
    runs = queries.require_runs(three_runs, ["a", "z", "m"])
    versions = queries.run_tasks(three_runs, runs)
    assert {t.id: (t.digest, t.tier, t.category) for t in versions.tasks.values()} == {
        t: (f"m-{t}", "hard", "m") for t in ("t1", "t2", "t3")}
    assert sorted(versions.tier_changes) == ["t1", "t2", "t3"]  # easy in z, hard in a and m
    frame = load_frame(three_runs, ["z", "a", "m"])
    assert frame.task_tiers == ["hard"] * 3 and frame.task_categories == ["m"] * 3
    assert sum("different tiers across runs" in n for n in frame.notes) == 3


def test_trial_detail_latest_run_and_artifact_path(three_runs: Store) -> None:
    assert browse.latest_run_with(three_runs, ["z", "a", "m"], "C:t2:0") == "m"
    assert browse.latest_run_with(three_runs, ["z", "a"], "C:t2:0") == "a"
    assert browse.latest_run_with(three_runs, ["z"], "C:t2:0") is None
    detail = browse.trial_detail(three_runs, "a", "C:t2:0", None)  # latest try
    assert detail is not None and detail.row.try_number == 3 and detail.row.tokens == 8
    assert detail.usage["input"] == 7 and detail.row.tool_calls == 2 and detail.calls == []
    three_runs.add_artifact("a", ArtifactRecord(trial_id="C:t2:0", name="log", kind="agent_log",
                                                relpath="trials/x/log", size=1), 3)
    assert browse.artifact_relpath(three_runs, "a", "C:t2:0", 3, "log") == "trials/x/log"
    assert browse.artifact_relpath(three_runs, "a", "C:t2:0", 0, "log") is None
    assert browse.trial_detail(three_runs, "a", "C:t2:0", 9) is None


def _row(cid: str, ams: float | None, pass_rate: float | None, usd: float | None,
         tok: float | None) -> ConfigRow:
    return ConfigRow(config_id=cid, label=cid, model="M", agent="a", n_tasks=4,
                     n_scored=0 if pass_rate is None else 4, n_infra_invalid=0, n_missing=0,
                     passes=round((pass_rate or 0) * 4), pass_rate=pass_rate, tiers={},
                     tokens=None, usd=None, tok_per_pass=tok, usd_per_pass=usd, ams=ams,
                     delta_best=None)


def test_leaderboard_order() -> None:
    card = Scorecard(rows=[_row("d", None, None, None, None), _row("c", 0.5, 0.25, 2.0, 100),
                           _row("b", 0.5, 0.75, None, 300), _row("a", 0.5, 0.25, 1.0, 200),
                           _row("e", 0.9, 0.5, 3.0, None)],
                     models=[], winners=Winners(), tiers=[], alpha=0.6, infra_policy="x",
                     tier_source="stored", budget_source="x", n_tasks=4)

    def ids(by: str) -> list[str]:
        return [card.rows[k].config_id for k in card.ranked(by)]

    assert ids("ams") == ["e", "b", "a", "c", "d"]  # AMS ties: higher pass rate, then label
    assert ids("pass") == ["b", "e", "a", "c", "d"]
    assert ids("usd") == ["a", "c", "e", "b", "d"]  # low first, n/a last
    assert ids("tok") == ["c", "a", "b", "d", "e"]
    with pytest.raises(ValueError, match="unknown leaderboard order"):
        card.ranked("x")


def test_scripted_and_raw_tokens_rules() -> None:
    assert is_scripted("scripted/solver") and is_scripted("scripted-chat/quitter")
    assert not is_scripted("scripted") and not is_scripted("openai/scripted/x")
    assert TokenUsage().raw_tokens is None and TokenUsage().total == 0
    assert TokenUsage(output=3).raw_tokens == 3 and TokenUsage(input=2, output=3).total == 5


def test_score_and_report_print_one_leaderboard(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        populate_grid(store)
    runner = CliRunner()

    def body(*args: str) -> list[str]:
        res = runner.invoke(app, [*args, "grid", "--store", str(tmp_path), "--resamples", "0"])
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        start = next(i for i, ln in enumerate(lines) if "leaderboard" in ln)
        return [ln for ln in lines[start:] if ln.startswith("│")][:8]

    scored, reported = body("score"), body("report")
    assert scored == reported and len(scored) == 8
    assert sum("scripted test model" in ln for ln in scored) == 2
    # the leaderboard order: AMS high first, n/a last
    ams = [ln.split("│")[-3].strip() for ln in scored]
    known = [float(a) for a in ams if a != "n/a"]
    assert known == sorted(known, reverse=True) and ams[len(known):] == ["n/a"] * (8 - len(known))

"""Tries held by cluster workers, on SQLite and on a real PostgreSQL server: a lease is claimed,
renewed and expires; a try closed by someone else refuses its former owner's late result (no try
counted twice) while its served model calls stay stored; closing and the owner's last write
race safely."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401

from agentmeter.records import (
    AgentSpec,
    ConfigRecord,
    ModelCallRecord,
    ModelSpec,
    RunRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.store.db import Store

CONFIG = ConfigRecord(id="cfg", label="scripted x native", model=ModelSpec(name="scripted/solver"),
                      agent=AgentSpec(name="native"))
A, B = "host-a:node-a:101", "host-b:node-b:202"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        st = Store.open(tmp_path / "runs")
    else:
        st = Store.open(request.getfixturevalue("pg_url"), runs_dir=tmp_path / "runs")
    st.create_run(RunRecord(id="r"))
    st.upsert_config(CONFIG, run_id="r")
    yield st
    st.close()


def trial(task: str, *, owner: str | None = None, expires: datetime | None = None,
          status: TrialStatus = TrialStatus.RUNNING, try_number: int = 0) -> TrialRecord:
    return TrialRecord(id=f"cfg:{task}:0", run_id="r", config_id="cfg", task_id=task, attempt=0,
                       try_number=try_number, status=status, lease_owner=owner,
                       lease_expires_at=expires)


def served(trial_id: str, seq: int) -> ModelCallRecord:
    return ModelCallRecord(trial_id=trial_id, seq=seq, wire_api="chat", client_api="chat",
                           model="m", upstream_model="m", status_code=200, stream=False,
                           started_at=datetime.now(UTC), latency_s=0.1,
                           usage=TokenUsage(input=100, output=10), cost_usd=0.25)


def test_lease_claim_renew_and_expiry(store: Store) -> None:
    now = datetime.now(UTC)
    held = trial("held", owner=A, expires=now + timedelta(seconds=30))
    assert store.save_trial(held)  # the owner's first write claims the try
    store.save_trial(trial("unowned"))  # e.g. the driver's row: no lease yet
    local = trial("local")
    store.save_trial(local)  # the local executor's: never leased
    done = trial("done", status=TrialStatus.PASSED)
    store.save_trial(done)

    # the owner renews; another owner cannot; the first renewal claims an unowned try;
    # a finished or unknown try cannot be renewed
    assert store.renew_leases("r", [held.id, "cfg:unowned:0"], A, 60, now=now) == []
    assert store.renew_leases("r", [held.id, done.id, "cfg:nope:0"], B, 60, now=now) == [
        held.id, done.id, "cfg:nope:0"]
    got = store.get_trial("r", held.id)
    assert got is not None and got.lease_owner == A
    assert got.lease_expires_at == now + timedelta(seconds=60)
    assert store.renew_leases("r", [held.id], A, 30) == []  # the database's clock
    got = store.get_trial("r", held.id)
    assert got is not None and got.lease_expires_at is not None
    assert got.lease_expires_at - store.clock() <= timedelta(seconds=30)
    assert abs(got.lease_expires_at - (datetime.now(UTC) + timedelta(seconds=30))) < timedelta(
        seconds=20)

    # a live lease is never closed; a lapsed one is, with its spending kept
    store.add_model_calls("r", [served(held.id, 0), served(held.id, 1)])
    assert store.close_expired_trials("r", "node died: lease expired",
                                      now=now + timedelta(seconds=5)) == []
    later = datetime.now(UTC) + timedelta(minutes=5)
    closed = store.close_expired_trials("r", "node died: lease expired", now=later)
    assert sorted(t.id for t in closed) == sorted([held.id, "cfg:unowned:0"])
    got = store.get_trial("r", held.id)
    assert got is not None
    assert (got.status, got.error, got.lease_owner) == (
        TrialStatus.INFRA_INVALID, "node died: lease expired", None)
    assert (got.model_calls, got.cost_usd, got.usage.input) == (2, 0.5, 200)
    # the local executor's running try keeps today's rule (closed on resume only)
    got_local = store.get_trial("r", local.id)
    assert got_local is not None and got_local.status is TrialStatus.RUNNING
    # a closed try's lease cannot be renewed: its owner learns it was fenced
    assert store.renew_leases("r", [held.id], A, 30) == [held.id]


@pytest.mark.parametrize("closer", ["expired", "by the driver", "on resume"])
def test_a_closed_try_refuses_its_owners_late_result(store: Store, closer: str) -> None:
    now = datetime.now(UTC)
    rec = trial("t", owner=A, expires=now + timedelta(seconds=30))
    assert store.save_trial(rec)
    store.add_model_calls("r", [served(rec.id, 0)])
    if closer == "expired":
        store.close_expired_trials("r", "node died", now=now + timedelta(minutes=1))
    elif closer == "by the driver":
        assert [t.id for t in store.close_trials("r", [rec.id], "node died")] == [rec.id]
    else:
        store.close_incomplete_trials("r", "interrupted")
    # the worker was only partitioned: it goes on, its calls are served and stored...
    store.add_model_calls("r", [served(rec.id, 1)])
    # ...but its verdict never overwrites the closed try
    late = rec.model_copy(update={"status": TrialStatus.PASSED, "reward": 1.0, "passed": True})
    assert store.save_trial(late) is False
    assert store.save_trial(late, owner=A) is False
    got = store.get_trial("r", rec.id)
    assert got is not None and got.status is TrialStatus.INFRA_INVALID and got.reward is None
    assert len(store.model_calls("r", rec.id)) == 2  # real spending, always stored...
    assert (got.model_calls, got.cost_usd) == (2, 0.5)  # ...and accounted on the closed try
    assert [t.status for t in store.trials("r")] == [TrialStatus.INFRA_INVALID]


def test_owner_writes_are_fenced_against_other_owners(store: Store) -> None:
    now = datetime.now(UTC)
    rec = trial("t", owner=A, expires=now + timedelta(seconds=30))
    assert store.save_trial(rec)
    # another worker (a duplicate task) cannot take or overwrite A's try
    assert store.save_trial(rec.model_copy(update={"lease_owner": B,
                                                   "status": TrialStatus.FAILED})) is False
    # the owner's own later writes go through, and a stale expiry in its record never
    # shortens the lease its renewals extended
    assert store.renew_leases("r", [rec.id], A, 600, now=now) == []
    assert store.save_trial(rec.model_copy(update={"turns": 3}))
    got = store.get_trial("r", rec.id)
    assert got is not None and got.turns == 3
    assert got.lease_expires_at == now + timedelta(seconds=600)
    final = rec.model_copy(update={"status": TrialStatus.PASSED, "passed": True})
    assert store.save_trial(final) and store.save_trial(final)  # the owner may rewrite its own
    got = store.get_trial("r", rec.id)
    assert got is not None and got.status is TrialStatus.PASSED and got.lease_owner == A
    # a finished try is not closed as expired; an unleased finished try refuses any owner
    assert store.close_expired_trials("r", "x", now=now + timedelta(days=1)) == []
    store.save_trial(trial("plain", status=TrialStatus.PASSED))
    assert store.save_trial(trial("plain", owner=B, status=TrialStatus.FAILED)) is False
    # the unfenced write (the local executor) is unchanged
    assert store.save_trial(trial("plain", status=TrialStatus.FAILED)) is True


def _race(store: Store, rec: TrialRecord) -> dict[str, object]:
    """Close the run's lapsed tries and write ``rec`` passed, from two threads at once."""
    gate = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def close() -> None:
        gate.wait()
        outcome["closed"] = [t.id for t in store.close_expired_trials("r", "node died")]

    def finish() -> None:
        gate.wait()
        outcome["written"] = store.save_trial(rec.model_copy(update={
            "status": TrialStatus.PASSED, "passed": True}))

    threads = [threading.Thread(target=close), threading.Thread(target=finish)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return outcome


def test_closing_and_the_owners_last_write_race_safely(store: Store) -> None:
    """A closer and the owner's final write, started together many times: each try ends either
    closed (and the late result refused) or with the owner's result (and not closed), never
    both."""
    now = datetime.now(UTC)
    for i in range(40):
        rec = trial(f"t{i}", owner=A, expires=now - timedelta(seconds=1))  # already lapsed
        assert store.save_trial(rec)
        outcome = _race(store, rec)
        got = store.get_trial("r", rec.id)
        assert got is not None
        if outcome["written"]:
            assert outcome["closed"] == [] and got.status is TrialStatus.PASSED, (i, outcome)
        else:
            assert outcome["closed"] == [rec.id], (i, outcome)
            assert got.status is TrialStatus.INFRA_INVALID

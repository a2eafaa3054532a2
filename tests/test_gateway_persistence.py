"""Spending survives crashes: each served call is in the store as it completes (SQLite and
PostgreSQL), a SIGKILLed try keeps its calls and resume does not count them twice; the
gateway's socket directory of a killed runner is removed; ``gateway serve`` fails cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from taskgen import make_task

from agentmeter.gateway import Gateway, ModelRegistry, sockdir
from agentmeter.pricing import PriceBook
from agentmeter.records import TokenUsage, TrialRecord, TrialStatus
from agentmeter.store.db import Store

CLI = [sys.executable, "-m", "agentmeter.cli"]


def _running_with_calls(open_store: object, run_id: str, at_least: int
                        ) -> tuple[TrialRecord, int] | None:
    try:
        with open_store() as st:  # type: ignore[operator]
            for t in st.trials(run_id, TrialStatus.RUNNING):
                n = len(st.model_calls(run_id, t.id, t.try_number))
                if n >= at_least:
                    return t, n
    except Exception:  # the runner is still creating the store
        return None
    return None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_mid_trial_keeps_served_calls_and_resume_counts_them_once(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "long")
    runs = tmp_path / "runs"
    env = dict(os.environ)
    if backend == "postgresql":
        url = request.getfixturevalue("pg_url")
        env["AGENTMETER_DATABASE_URL"] = url

        def open_store() -> Store:
            return Store.open(url, runs_dir=runs)
    else:
        env.pop("AGENTMETER_DATABASE_URL", None)

        def open_store() -> Store:
            return Store.open(runs)
    rid = "killed"
    log = tmp_path / "runner.log"
    with log.open("w") as err_out:  # 45 look-around turns: the kill lands mid-trial
        proc = subprocess.Popen([*CLI, "run", "--suite", str(suite), "-a", "native", "-m",
                                 "scripted/explorer-45", "--run-id", rid, "--store", str(runs)],
                                stdout=subprocess.DEVNULL, stderr=err_out, env=env)
    deadline = time.monotonic() + 180
    found = None
    while found is None and time.monotonic() < deadline:
        assert proc.poll() is None, f"the runner exited early: {log.read_text()[-2000:]}"
        found = _running_with_calls(open_store, rid, 3)
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert found is not None, "no call was stored while its trial ran"
    trial, seen = found
    with open_store() as st:
        killed = st.get_trial(rid, trial.id, trial.try_number)
        calls = st.model_calls(rid, trial.id, trial.try_number)
    assert killed is not None and killed.status is TrialStatus.RUNNING  # killed mid-trial
    assert len(calls) >= seen and [c.seq for c in calls] == list(range(len(calls)))
    assert all(c.status_code == 200 and c.usage.input and c.cost_usd for c in calls)

    r = subprocess.run([*CLI, "resume", rid, "--store", str(runs)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    with open_store() as st:
        tries = st.trials(rid)
        all_calls = st.model_calls(rid)
        closed = st.get_trial(rid, trial.id, trial.try_number)
        assert st.model_calls(rid, trial.id, trial.try_number) == calls  # kept as they were
        per_try = {(t.id, t.try_number): len(st.model_calls(rid, t.id, t.try_number))
                   for t in tries}
    assert closed is not None and closed.status is TrialStatus.INFRA_INVALID
    # the killed try carries its spending, summed from its stored calls
    usage = TokenUsage()
    for c in calls:
        usage = usage + c.usage
    assert closed.model_calls == len(calls) and closed.usage == usage
    assert closed.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in calls))
    rerun = [t for t in tries if t.id == trial.id and t.try_number > trial.try_number]
    assert rerun and rerun[-1].status.final and rerun[-1].status is not TrialStatus.INFRA_INVALID
    # every try's count is its own stored calls, each stored once: nothing counted twice
    assert all(t.model_calls == per_try[(t.id, t.try_number)] for t in tries)
    assert sum(t.cost_usd or 0 for t in tries) == pytest.approx(
        sum(c.cost_usd or 0 for c in all_calls))


async def test_socket_dir_of_a_killed_owner_is_removed_at_the_next_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    top = Path(tempfile.mkdtemp(prefix="amgw-", dir="/tmp"))  # short: socket paths are limited
    monkeypatch.setattr(tempfile, "tempdir", str(top))
    script = ("import asyncio\nfrom agentmeter.gateway import Gateway, ModelRegistry\n"
              "from agentmeter.pricing import PriceBook\n"
              "async def main():\n"
              "    gw = Gateway(ModelRegistry(), PriceBook())\n"
              "    await gw.start(private_socket=True)\n"
              "    print(gw.unix_socket, flush=True)\n"
              "    await asyncio.Event().wait()\n"
              "asyncio.run(main())\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(top)})
    try:
        assert proc.stdout is not None
        sock = Path(proc.stdout.readline().strip())
        assert sock.exists() and sock.parent.parent == top
        assert sock.parent.name.startswith(f"agentmeter-gw-{proc.pid}-")
    finally:
        proc.kill()
        proc.wait()
    dead = sock.parent
    assert dead.exists()  # a SIGKILL leaves it behind
    reused = top / f"agentmeter-gw-{os.getpid()}-1-abcd"  # our pid, another start time
    reused.mkdir()
    foreign = top / "agentmeter-gw-abcdefgh"  # not named by its owner: not ours to judge
    foreign.mkdir()
    live = sockdir.make()  # a live owner's (ours)
    gw = Gateway(ModelRegistry(), PriceBook())
    await gw.start(private_socket=True)
    try:
        assert gw.unix_socket is not None
        mine = gw.unix_socket.parent
        assert mine.name.startswith(f"agentmeter-gw-{os.getpid()}-")
        assert not dead.exists() and not reused.exists()
        assert live.exists() and foreign.exists()
    finally:
        await gw.stop()
    assert not mine.exists()


def test_gateway_serve_without_the_provider_key_fails_cleanly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    r = subprocess.run([*CLI, "gateway", "serve", "-m", "deepseek/deepseek-chat", "--port", "0"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, r.stderr
    assert "DEEPSEEK_API_KEY" in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) <= 2, r.stderr
    # a USD budget for a model with no price: the same, a message and exit 2
    r = subprocess.run([*CLI, "gateway", "serve", "-m", "vllm/local", "--port", "0",
                        "--max-usd", "1"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "max_usd" in r.stderr


def test_calls_written_straight_to_sqlite_read_back_as_written(tmp_path: Path) -> None:
    """Calls go to SQLite on the driver (the store's fast path for one call as it completes):
    every field reads back as written, a rewrite is idempotent, a bad key is a StoreError."""
    from agentmeter.records import ModelCallRecord, RunRecord, utcnow
    from agentmeter.store.db import StoreError

    calls = [ModelCallRecord(
        trial_id="cfg:task:0", seq=i, wire_api="chat", client_api="messages", model="m é",
        upstream_model="u", status_code=200 if i else 499, stream=bool(i % 2),
        started_at=utcnow(), latency_s=0.25, ttft_s=0.01 if i else None,
        usage=TokenUsage(input=10 + i, output=None if i == 2 else 3, cache_read=2),
        cost_usd=None if i == 2 else 0.5, error=None if i else "client disconnected",
        scripted=bool(i)) for i in range(3)]
    with Store.open(tmp_path) as st:
        st.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        st.add_model_calls("r", calls[:2], try_number=3)
        st.add_model_calls("r", calls, try_number=3)
        assert st.model_calls("r", try_number=3) == calls
        with pytest.raises(StoreError, match="model calls of run 'nope'"):
            st.add_model_calls("nope", calls[:1])
        assert st.model_calls("nope") == []

"""Group commit of finished calls (gateway.persist): a reply ends only after its call's batch is
committed; calls of several trials that finish together share one transaction; a batch the
store refuses is stored call by call; a call whose client saw the end of its reply survives the
gateway being SIGKILLed right after (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from polling import eventually_async
from test_gateway import request_body

from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.gateway.metering import StoreSink, TrialState
from agentmeter.gateway.persist import CallWriter
from agentmeter.pricing import PriceBook
from agentmeter.records import ModelCallRecord, RunRecord
from agentmeter.store.db import Store

MODEL = "scripted/explorer-50"
Item = tuple[str, int, ModelCallRecord]


class HeldStore:
    """A store whose commits wait for ``gate`` (its first only, with ``first_only``); passes
    them on to ``inner`` when given. Records each committed batch."""

    def __init__(self, inner: Store | None = None, first_only: bool = False) -> None:
        self.inner, self.first_only = inner, first_only
        self.gate, self.entered = threading.Event(), threading.Event()
        self.batches: list[list[Item]] = []
        self.tried: list[int] = []  # the size of every batch tried, committed or not

    def add_call_batch(self, calls: Sequence[Item]) -> None:
        self.tried.append(len(calls))
        if not (self.first_only and self.entered.is_set()):
            self.entered.set()
            assert self.gate.wait(30)
        if self.inner is not None:
            self.inner.add_call_batch(calls)
        self.batches.append(list(calls))


async def _call(s: aiohttp.ClientSession, gw: Gateway, token: str, stream: bool = False
                ) -> tuple[int, bytes]:
    async with s.post(f"{gw.base_url}/v1/chat/completions", json=request_body("chat", stream),
                      headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.read()  # the whole reply: returns once the client saw its end


@pytest.mark.parametrize("stream", [False, True])
async def test_the_reply_ends_only_after_its_call_is_committed(stream: bool) -> None:
    gw = Gateway(ModelRegistry(), PriceBook())
    await gw.start()
    store = HeldStore()
    token = gw.open_trial("t", MODEL, sink=StoreSink(store, "r", 2))
    try:
        async with aiohttp.ClientSession() as s:
            reply = asyncio.create_task(_call(s, gw, token, stream))
            assert await asyncio.to_thread(store.entered.wait, 30)  # the commit is under way
            await asyncio.sleep(0.3)  # a reply released before its commit would end by now
            assert not reply.done() and store.batches == []
            assert gw.trial_meter("t").stored_seqs == []
            store.gate.set()
            status, body = await asyncio.wait_for(reply, 30)
        assert status == 200 and body
        [[(run_id, try_number, record)]] = store.batches
        assert (run_id, try_number, record.seq, record.stream) == ("r", 2, 0, stream)
        assert gw.trial_meter("t").stored_seqs == [0]
    finally:
        store.gate.set()
        await gw.stop()


async def test_calls_of_several_trials_that_finish_together_share_one_transaction(
        tmp_path: Path) -> None:
    with Store.open(tmp_path) as real:
        for run_id in ("r1", "r2"):
            real.create_run(RunRecord(id=run_id, backend="local", attempts=1, concurrency=1))
        store = HeldStore(real, first_only=True)
        gw = Gateway(ModelRegistry(), PriceBook())
        await gw.start()
        after: list[int] = []
        sinks = [StoreSink(store, "r1", 0, after=lambda c: after.append(c.seq))] + [
            StoreSink(store, f"r{1 + i % 2}", i, trial_id=f"graded{i}") for i in range(1, 6)]
        tokens = [gw.open_trial(f"t{i}", MODEL, sink=sink) for i, sink in enumerate(sinks)]
        try:
            async with aiohttp.ClientSession() as s:
                first = asyncio.create_task(_call(s, gw, tokens[0]))
                assert await asyncio.to_thread(store.entered.wait, 30)
                rest = [asyncio.create_task(_call(s, gw, tok, stream=i % 2 == 0))
                        for i, tok in enumerate(tokens[1:])]
                assert await eventually_async(lambda: len(gw._writer._queue) == 5, 30)
                assert not any(t.done() for t in [first, *rest])
                store.gate.set()
                assert [status for status, _ in await asyncio.gather(first, *rest)] == [200] * 6
            assert [len(b) for b in store.batches] == [1, 5]  # the five in one transaction
            assert gw.commits == (2, 6)
            assert after == [0]
            for i in range(6):
                assert gw.trial_meter(f"t{i}").stored_seqs == [0]
            stored = {(r, c.trial_id) for r in ("r1", "r2") for c in real.model_calls(r)}
            assert stored == {("r1", "t0")} | {(f"r{1 + i % 2}", f"graded{i}")
                                                for i in range(1, 6)}
            assert all(len(real.model_calls(f"r{1 + i % 2}", f"graded{i}", try_number=i)) == 1
                       for i in range(1, 6))
        finally:
            store.gate.set()
            await gw.stop()


async def test_a_batch_the_store_refuses_is_stored_call_by_call(tmp_path: Path) -> None:
    with Store.open(tmp_path) as real:
        real.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        store = HeldStore(real, first_only=True)
        gw = Gateway(ModelRegistry(), PriceBook())
        await gw.start()
        good, bad = StoreSink(store, "r", 0), StoreSink(store, "no-such-run", 0)
        tokens = [gw.open_trial(name, MODEL, sink=sink)
                  for name, sink in (("held", good), ("good", good), ("bad", bad))]
        try:
            async with aiohttp.ClientSession() as s:
                held = asyncio.create_task(_call(s, gw, tokens[0]))
                assert await asyncio.to_thread(store.entered.wait, 30)
                rest = [asyncio.create_task(_call(s, gw, tok)) for tok in tokens[1:]]
                assert await eventually_async(lambda: len(gw._writer._queue) == 2, 30)
                store.gate.set()
                assert [st for st, _ in await asyncio.gather(held, *rest)] == [200] * 3
            assert store.tried == [1, 2, 1, 1]  # the pair refused whole, then one by one
            assert sorted(c.trial_id for c in real.model_calls("r")) == ["good", "held"]
            assert gw.trial_meter("good").stored_seqs == [0]
            bad_meter = gw.trial_meter("bad")
            assert bad_meter.stored_seqs == [] and bad_meter.sink_error is not None
            assert "no-such-run" in bad_meter.sink_error
        finally:
            store.gate.set()
            await gw.stop()


async def test_a_lone_call_is_committed_on_the_loop_before_its_reply_ends(tmp_path: Path) -> None:
    with Store.open(tmp_path) as real:
        real.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        gw = Gateway(ModelRegistry(), PriceBook())
        await gw.start()
        after: list[tuple[int, int]] = []  # (seq, calls in the store when the hook ran)
        token = gw.open_trial("t", MODEL, sink=StoreSink(
            real, "r", 0, after=lambda c: after.append((c.seq, len(real.model_calls("r"))))))
        try:
            async with aiohttp.ClientSession() as s:
                for i in range(2):
                    assert (await _call(s, gw, token, stream=i == 1))[0] == 200
                    assert len(real.model_calls("r")) == i + 1  # committed when the reply ended
            assert gw._writer.on_loop == 2 and gw._writer._thread is None  # no hand-off
            assert gw.commits == (2, 2) and after == [(0, 1), (1, 2)]
            assert gw.trial_meter("t").stored_seqs == [0, 1]
        finally:
            await gw.stop()


async def test_a_lone_call_never_waits_on_the_loop_for_another_writers_lock(
        tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock: the lone call goes to the writer thread
    (which waits for the lock) and the event loop keeps running; without the no-wait begin
    (``Store.add_call_batch_now``) the loop would block in the busy wait (30 s)."""
    import sqlite3

    with Store.open(tmp_path) as real:
        real.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        gw = Gateway(ModelRegistry(), PriceBook())
        await gw.start()
        token = gw.open_trial("t", MODEL, sink=StoreSink(real, "r", 0))
        other = sqlite3.connect(tmp_path / "agentmeter.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the write lock, held
        try:
            async with aiohttp.ClientSession() as s:
                reply = asyncio.create_task(_call(s, gw, token))
                assert await eventually_async(lambda: gw._writer._busy, 30)  # on the thread
                assert not reply.done() and gw._writer.on_loop == 0
                other.execute("COMMIT")
                assert (await asyncio.wait_for(reply, 30))[0] == 200
            assert len(real.model_calls("r")) == 1 and gw.commits == (1, 1)
            assert gw._writer.on_loop == 0 and gw.trial_meter("t").stored_seqs == [0]
        finally:
            other.close()
            await gw.stop()


GATEWAY = """
import asyncio, sys
from pathlib import Path
from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.gateway.bounds import GatewayLimits
from agentmeter.gateway.metering import StoreSink, TrialState
from agentmeter.gateway.persist import CallWriter
from agentmeter.pricing import PriceBook
from agentmeter.records import RunRecord
from agentmeter.store.db import Store

async def main():
    store = Store.open(sys.argv[1], runs_dir=Path(sys.argv[2]))
    store.create_run(RunRecord(id="crash", backend="local", attempts=1, concurrency=1))
    gw = Gateway(ModelRegistry(), PriceBook(), limits=GatewayLimits(max_in_flight=64))
    await gw.start()
    token = gw.open_trial("t", sys.argv[3], sink=StoreSink(store, "crash", 0))
    print(gw.port, token, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.slow  # a gateway subprocess (≈ 5–15 s; 17–36 s on a loaded machine)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_reply_the_client_saw_end_survives_a_sigkill_right_after(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    location = request.getfixturevalue("pg_url") if backend == "postgresql" \
        else str(tmp_path / "calls.db")
    proc = subprocess.Popen([sys.executable, "-c", GATEWAY, location, str(tmp_path), MODEL],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    seen = 0
    try:
        assert proc.stdout is not None
        port, token = (await asyncio.to_thread(proc.stdout.readline)).split()
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        killed = asyncio.Event()

        async def one(s: aiohttp.ClientSession, i: int) -> None:
            nonlocal seen
            try:
                async with s.post(url, json=request_body("chat", i % 2 == 0),
                                  headers={"Authorization": f"Bearer {token}"}) as r:
                    await r.read()
                    ok = r.status == 200
            except aiohttp.ClientError:
                return  # cut by the kill: never seen whole
            if ok and not killed.is_set():
                seen += 1
                if seen == 20:  # the kill lands while the other calls are under way
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.set()

        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(one(s, i) for i in range(48)))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and seen == 20
    with Store.open(location, runs_dir=tmp_path) as st:
        stored = st.model_calls("crash")
    assert len(stored) >= seen  # every reply a client saw end was committed before it
    assert len({c.seq for c in stored}) == len(stored)


def test_a_batch_is_written_whole_with_unstorable_text_escaped(tmp_path: Path) -> None:
    from agentmeter.records import TokenUsage, utcnow
    from agentmeter.store.schema import storable

    bad = "x\x00y\udcffz\ud800"
    calls = [ModelCallRecord(
        trial_id=f"t{i}", seq=i, wire_api="chat", client_api="chat", model=bad,
        upstream_model="u", status_code=200, stream=False, started_at=utcnow(), latency_s=0.1,
        ttft_s=None, usage=TokenUsage(input=i, output=1), cost_usd=None, error=bad)
        for i in range(3)]
    with Store.open(tmp_path) as st:
        st.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        st.add_call_batch([("r", i, c) for i, c in enumerate(calls)])
        got = st.model_calls("r")
        assert [(c.trial_id, c.usage.input) for c in got] == [("t0", 0), ("t1", 1), ("t2", 2)]
        assert all(c.error == storable(bad) and c.model == storable(bad) for c in got)
        with pytest.raises(Exception, match="no-such-run"):  # all of a batch or none of it
            st.add_call_batch([("r", 0, calls[0].model_copy(update={"seq": 9})),
                               ("no-such-run", 0, calls[1])])
        assert len(st.model_calls("r")) == 3


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_only_sqlite_commits_a_call_without_waiting(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """``add_call_batch_now`` (the gateway's commit on its loop) writes on SQLite only: on
    PostgreSQL a commit is a network round trip, so it declines and the call goes to the
    writer thread."""
    from agentmeter.records import TokenUsage, utcnow

    location = request.getfixturevalue("pg_url") if backend == "postgresql" else str(tmp_path)
    call = ModelCallRecord(trial_id="t", seq=0, wire_api="chat", client_api="chat", model="m",
                           upstream_model="m", status_code=200, stream=False,
                           started_at=utcnow(), latency_s=0.1, ttft_s=None,
                           usage=TokenUsage(input=1, output=1), cost_usd=None)
    with Store.open(location, runs_dir=tmp_path) as st:
        st.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
        assert st.add_call_batch_now([("r", 0, call)]) is (backend == "sqlite")
        assert len(st.model_calls("r")) == (1 if backend == "sqlite" else 0)


async def test_a_handler_cancelled_while_its_call_commits_still_stores_it() -> None:
    """The handler (its run ending) is cancelled while its call waits for the commit: the
    call is committed all the same, the cancelled wait raises at once."""
    store = HeldStore()
    writer = CallWriter()
    trial = TrialState.__new__(TrialState)  # only what the writer reads of a trial
    trial.sink, trial.stored, trial.sink_error = StoreSink(store, "r", 0), set(), None
    record = ModelCallRecord(trial_id="t", seq=7, wire_api="chat", client_api="chat",
                             model="m", upstream_model="m", status_code=200, stream=False,
                             started_at=datetime.now(UTC), latency_s=0.1)
    waiting = asyncio.create_task(writer.write(trial, record))
    assert await asyncio.to_thread(store.entered.wait, 30)  # the commit is under way
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    store.gate.set()
    await writer.close()
    assert [[item[2].seq for item in batch] for batch in store.batches] == [[7]]
    assert trial.stored == {7} and trial.sink_error is None

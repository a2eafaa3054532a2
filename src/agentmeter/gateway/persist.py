"""Each finished call handed to its trial's sink (e.g. stored) as it completes: on a writer
thread, with group commit, or for a lone call on the event loop.

Finished calls queue to one writer thread. Whenever it is free it takes every call queued so far
and writes them as one batch: the calls of all trials whose sink is a ``StoreSink`` on the same
store in ONE transaction (``CallStore.add_call_batch``), other sinks one call at a time, in the
order the calls finished. While a batch commits the next one gathers, so a batch is flushed as
soon as the previous commit ends (never held back on a timer): under load one commit carries
many calls; alone, a call waits for its own commit only.

A lone call (no other call under way on the gateway, none finished in the last
``LONE_GAP_S``, the writer idle) whose store commits without waiting (SQLite with its write
lock free: ``Store.add_call_batch_now``) is committed right away on the event loop instead:
the two thread hand-offs (waking the writer, waking the loop back) were most of a lone call's
wait for its commit, and with nothing else under way the commit blocks no other call. Calls
finishing close together are a load (e.g. short calls of many clients, each served within one
turn of the loop, so none sees another under way): they go to the thread, where they share
commits. If the lock is held (another writer) or the store is not SQLite (PostgreSQL: a commit
is a network round trip), the call goes to the writer thread as any other.

A call's handler awaits its batch's commit before the client sees the end of the response: a call
a client received in full is durable (a runner SIGKILLed after that loses nothing). A failing
sink is noted on the trial (the runner then stores the call at trial end); it never fails the
call. A batch the store refuses is retried one call at a time, so one bad call fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from agentmeter.gateway.metering import StoreSink, TrialState
from agentmeter.records import ModelCallRecord

#: a call finishing within this long of the previous one is not lone (see the module's doc)
LONE_GAP_S = 0.001


@dataclass
class _Job:
    trial: TrialState
    record: ModelCallRecord
    done: asyncio.Future[None] | None  # None: committed on the loop (``CallWriter._now``)


class CallWriter:
    """``lone``: whether the call finishing now is the only one under way (the gateway's),
    which lets it commit on the event loop (see the module's doc); None: never."""

    def __init__(self, lone: Callable[[], bool] | None = None) -> None:
        self._lone = lone
        self._last = 0.0  # when the last call was written (``time.monotonic``)
        self._busy = False  # the thread is writing a batch (under ``_cond``)
        self._queue: list[_Job] = []
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()  # the current thread's
        #: calls finished in this turn of the event loop, handed to the thread together at the
        #: turn's end (``_hand_over``): one lock and one wake-up per turn, not per call
        self._turn: list[_Job] = []
        self._turn_lock = threading.Lock()  # taken by event loops only (one in a gateway)
        #: transactions and calls written (for tests and benchmarks)
        self.batches = 0
        self.calls = 0
        self.on_loop = 0  # of them committed on the event loop (lone calls)

    async def write(self, trial: TrialState, record: ModelCallRecord) -> None:
        """Queue the call and wait until its batch is written (committed)."""
        if trial.sink is None:
            return
        if self._lone is not None:
            now = time.monotonic()
            last, self._last = self._last, now
            if now - last > LONE_GAP_S and self._now(trial, record):
                return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._turn_lock:
            self._turn.append(_Job(trial, record, done))
            first = len(self._turn) == 1
        if first:  # the turn's first call: hand the turn's calls over when the turn ends
            loop.call_soon(self._hand_over)
        # a cancelled handler cancels ``done`` only: its call stays queued and is written all
        # the same (``_release`` skips a future already done); no ``asyncio.shield`` (two
        # more futures and their callbacks per call)
        await done

    def _now(self, trial: TrialState, record: ModelCallRecord) -> bool:
        """Commit a lone call on the loop if its store can without waiting (True: stored, or
        its failure noted as the thread would), else False (then it goes to the thread)."""
        sink = trial.sink
        commit = getattr(sink.store, "add_call_batch_now", None) \
            if isinstance(sink, StoreSink) else None
        if commit is None or self._turn:
            return False
        with self._cond:
            if self._queue or self._busy:
                return False  # earlier calls not yet committed: this one after them, in order
        assert self._lone is not None
        if not self._lone():
            return False  # other calls under way: the thread, where commits gather
        job = _Job(trial, record, None)
        try:
            if not commit([_item(job)]):
                return False  # another writer holds the lock: waited for on the thread
        except Exception as e:
            _failed(job, e)
        else:
            _stored(job)
        self.batches += 1
        self.calls += 1
        self.on_loop += 1
        return True

    def _hand_over(self) -> None:
        """The calls finished so far to the writer thread's queue, with one wake-up."""
        with self._turn_lock:
            jobs, self._turn = self._turn, []
        if not jobs:
            return
        with self._cond:
            self._queue.extend(jobs)
            if self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._stop,),
                                                name="agentmeter-calls", daemon=True)
                self._thread.start()
            self._cond.notify()

    async def close(self) -> None:
        """Wait for queued writes, then stop the thread."""
        self._hand_over()
        with self._cond:
            thread, self._thread = self._thread, None
            self._stop.set()
            self._cond.notify_all()
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def _run(self, stop: threading.Event) -> None:
        while True:
            with self._cond:
                self._busy = False
                while not self._queue and not stop.is_set():
                    self._cond.wait()
                batch, self._queue = self._queue, []
                if not batch:
                    return
                self._busy = True
            try:
                _write_batch(batch)
            finally:  # released whatever happened: a handler never waits forever
                self.batches += 1
                self.calls += len(batch)
                _wake(batch)


def _wake(batch: list[_Job]) -> None:
    loops: dict[asyncio.AbstractEventLoop, list[_Job]] = defaultdict(list)
    for job in batch:
        if job.done is not None:
            loops[job.done.get_loop()].append(job)
    for loop, jobs in loops.items():  # one wake-up of each waiting loop per batch
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_release, jobs)


def _release(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.done is not None and not job.done.done():
            job.done.set_result(None)


def _write_batch(batch: list[_Job]) -> None:
    """Each store's calls in one transaction, then their ``after`` hooks; other sinks one by
    one; a sink's failure noted on its trial."""
    by_store: dict[int, list[_Job]] = defaultdict(list)
    for job in batch:
        if isinstance(job.trial.sink, StoreSink):
            by_store[id(job.trial.sink.store)].append(job)
        else:
            _store_one(job)
    for jobs in by_store.values():
        if len(jobs) > 1:
            try:
                _commit(jobs)
            except Exception:  # one call may be bad (e.g. its run is gone): each on its own
                for job in jobs:
                    _store_one(job)
                continue
            for job in jobs:
                _stored(job)
        else:
            _store_one(jobs[0])


def _commit(jobs: list[_Job]) -> None:
    sink = jobs[0].trial.sink
    assert isinstance(sink, StoreSink)
    sink.store.add_call_batch([_item(job) for job in jobs])


def _item(job: _Job) -> tuple[str, int, ModelCallRecord]:
    sink = job.trial.sink
    assert isinstance(sink, StoreSink)
    record = job.record
    if sink.trial_id is not None and sink.trial_id != record.trial_id:
        record = record.model_copy(update={"trial_id": sink.trial_id})
    return sink.run_id, sink.try_number, record


def _store_one(job: _Job) -> None:
    sink = job.trial.sink
    try:
        if isinstance(sink, StoreSink):
            sink.store.add_call_batch([_item(job)])
        else:
            assert sink is not None
            sink(job.record)
    except Exception as e:
        _failed(job, e)
        return
    _stored(job)


def _failed(job: _Job, e: Exception) -> None:
    """The store is down or locked, or refused the call: the runner retries at trial end."""
    job.trial.sink_error = (f"call {job.record.seq} not stored as it completed: "
                            f"{type(e).__name__}: {e}")


def _stored(job: _Job) -> None:
    """The call is committed: its hook (e.g. the try's books settled again), then noted."""
    sink = job.trial.sink
    if isinstance(sink, StoreSink) and sink.after is not None:
        try:
            sink.after(job.record)
        except Exception as e:
            job.trial.sink_error = (f"call {job.record.seq} stored, its hook failed: "
                                    f"{type(e).__name__}: {e}")
    job.trial.stored.add(job.record.seq)

"""Each finished call handed to its trial's sink (e.g. stored) as it completes, off the event loop.

Sinks run on one writer thread, in the order calls finish, so a database write never blocks the
gateway's loop and writes of one gateway never contend with each other. The call's handler awaits
its write before the client sees the end of the response: a call a client received in full is
durable (a runner SIGKILLed after that loses nothing). A failing sink is noted on the trial (the
runner then stores the call at trial end); it never fails the call.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from agentmeter.gateway.metering import TrialState
from agentmeter.records import ModelCallRecord


class CallWriter:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    async def write(self, trial: TrialState, record: ModelCallRecord) -> None:
        if trial.sink is None:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="agentmeter-calls")
        job = asyncio.get_running_loop().run_in_executor(self._pool, _store, trial, record)
        # shielded: a cancelled handler must not drop a write that is queued or under way
        await asyncio.shield(job)

    async def close(self) -> None:
        """Wait for queued writes, then stop the thread."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True)


def _store(trial: TrialState, record: ModelCallRecord) -> None:
    assert trial.sink is not None
    try:
        trial.sink(record)
    except Exception as e:  # the store is down or locked: the runner retries at trial end
        trial.sink_error = f"call {record.seq} not stored as it completed: {type(e).__name__}: {e}"
        return
    trial.stored.add(record.seq)

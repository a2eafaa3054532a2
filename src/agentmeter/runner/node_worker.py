"""What a Ray worker process keeps between the jobs of ``runner/ray_node.py``: one event loop
(:func:`run_async`) and the tries' scratch directories (:func:`new_scratch`, removed off the
critical path by :data:`sweeper`; a dead worker's by :func:`remove_stale_scratch`)."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

#: a try's scratch directory on its node: this prefix, the worker's pid, a random part
SCRATCH_PREFIX = "agentmeter-node-"
T = TypeVar("T")


def new_scratch() -> Path:
    """A try's scratch runs directory, named by this process (removed once its artifacts are
    packed, by :data:`sweeper` off the try's critical path; by the node's next worker if this
    one was killed)."""
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))


class Sweeper:
    """Removes finished tries' scratch directories on one background thread, so a try's result
    goes back without waiting for its files to be deleted. Guaranteed: a worker's next job waits
    for the backlog when it exceeds ``MAX_PENDING`` (disk use stays bounded), the worker's exit
    removes what is left (``atexit``), and a killed worker's directories are removed by the
    node's next worker (:func:`remove_stale_scratch`)."""

    MAX_PENDING = 4

    def __init__(self) -> None:
        self.queue: queue.Queue[Path] = queue.Queue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def discard(self, path: Path) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="agentmeter-scratch")
                self.thread.start()
        self.queue.put(path)

    def _run(self) -> None:
        while True:
            path = self.queue.get()
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                self.queue.task_done()

    def bound(self) -> None:
        """Before a new job: wait for the backlog if it has grown past ``MAX_PENDING``."""
        if self.queue.unfinished_tasks > self.MAX_PENDING:
            self.drain()

    def drain(self) -> None:
        """Remove every directory still queued, now (in this thread if the sweeper is gone)."""
        if self.thread is not None and self.thread.is_alive():
            self.queue.join()
            return
        while True:
            try:
                path = self.queue.get_nowait()
            except queue.Empty:
                return
            shutil.rmtree(path, ignore_errors=True)
            self.queue.task_done()


sweeper = Sweeper()
atexit.register(sweeper.drain)


# --- per worker process: one event loop, kept between jobs ------------------------------------

_runner: asyncio.Runner | None = None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on the worker's own event loop, made once and kept between jobs
    (a new loop per job, its default executor's threads and its teardown cost ≈ 10 ms a try).
    Nothing of a job survives it on the loop: it runs in a fresh copy of the caller's context,
    its leftover tasks are cancelled and awaited and its async generators closed, as
    ``asyncio.run`` would; a job that ends in anything but an
    ``Exception`` (Ctrl-C, Ray's cancellation, SystemExit) or leaves the loop unusable takes the
    loop with it and the next job makes a new one. Off the main thread (tests running a node in
    a thread) each call has a loop of its own."""
    global _runner
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    if _runner is None:
        _runner = asyncio.Runner()
    runner = _runner
    ok = False
    try:
        out = runner.run(coro, context=contextvars.copy_context())  # a job's own context
        ok = True
        return out
    except Exception:
        ok = True
        raise
    finally:
        if not (ok and _settle(runner)):
            _runner = None
            runner.close()


def _settle(runner: asyncio.Runner) -> bool:
    """Cancel and await what a job left on the loop; whether the loop is fit for the next."""
    try:
        loop = runner.get_loop()
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        return not loop.is_closed() and not loop.is_running()
    except BaseException:  # noqa: BLE001 - any failure here: the loop is not reused
        return False


@atexit.register
def _close_runner() -> None:
    global _runner
    if _runner is not None:
        runner, _runner = _runner, None
        runner.close()


def remove_stale_scratch() -> None:
    """Remove the scratch directories of this node's dead workers (their pid is gone)."""
    for d in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = d.name.removeprefix(SCRATCH_PREFIX).split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)

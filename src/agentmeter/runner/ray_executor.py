"""The Ray executor (``--executor ray``): a run's trials as Ray tasks across a cluster's nodes.

One Ray task per try (a scenario: per run of its steps), ``num_cpus=0``,
``resources={"agentmeter_slots": 1}``, ``max_retries=0``: a node declares how many sandboxes it
holds with ``ray start --resources '{"agentmeter_slots": N}'`` and Ray places the tasks;
agentmeter retries infra failures itself (``max_infra_retries``). The node side is
``runner/ray_node.py``; tasks travel as tar blobs (inside each try up to 64 KiB: one scheduling
key for every try, a worker's lease reused for the next; larger ones ``ray.put`` once per task)
and artifacts come back into the driver's run directory (``runner/shipping.py``).

What dies, and what happens:

- a worker process or a node (``WorkerCrashedError``, ``NodeDiedError``, ``ObjectLostError``,
  …): the try is closed ``infra_invalid`` ("node died: …", its stored spending kept) and, within
  ``max_infra_retries``, run again wherever Ray places it;
- a node that stops renewing its leases (hung, partitioned): once the lease lapses the try is
  closed the same way, its Ray task cancelled (``force=True``); the node's late writes are
  refused by the store's owner fence, so no try counts twice;
- the driver: Ray ends the job's tasks; ``agentmeter resume RUN`` (anywhere with the store URL)
  first waits for the leases of tries still running to end or lapse, never closing a live one.

Pre-flight, before anything is written: ``runner/ray_cluster.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentmeter.records import TrialRecord, TrialStatus
from agentmeter.runner import ray_node, shipping
from agentmeter.runner.executor import (
    PrepareCallback,
    ProgressCallback,
    RunProgress,
    _supersede,
    _Unit,
    pending_work,
)
from agentmeter.runner.plan import PlannedTrial, build_plan
from agentmeter.runner.ray_cluster import (
    NO_NODES_S,
    SLOTS,
    Cluster,
    ClusterError,
    model_files,
    one_line,
    slot_nodes,
    store_url,
)
from agentmeter.runner.trial import INTERRUPTED
from agentmeter.store.db import Store
from agentmeter.tasks.models import Task

if TYPE_CHECKING:
    from agentmeter.runner.session import PreparedRun

LEASE_TTL_S = 30.0
RENEW_EVERY_S = 5.0
#: how often the driver closes tries whose lease lapsed
LEASE_CHECK_S = 5.0
#: a task blob up to this size travels inside each of its tries (Ray inlines arguments below
#: 100 KiB); a larger one is put in the object store once
INLINE_BLOB_BYTES = 64 * 1024
#: the longest one ray.wait blocks (the loop also watches leases and cancellation)
WAIT_S = 1.0


@dataclass
class _Job:
    steps: list[PlannedTrial]
    records: list[TrialRecord]
    infra_left: int
    #: scenario units: the unit and its run number
    unit: _Unit | None = None
    run: int = 0


@dataclass
class _Driver:
    cluster: Cluster
    store: Store
    run_id: str
    prepared: PreparedRun
    progress: RunProgress
    on_progress: ProgressCallback | None
    in_flight: dict[Any, _Job] = field(default_factory=dict)
    blobs: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)
    build_failures: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        import ray

        self.remote = ray.remote(ray_node.run_job).options(
            num_cpus=0, resources={SLOTS: 1}, max_retries=0)
        self.files = model_files(self.prepared)
        self.url = store_url(self.store)

    def _blob(self, task: Task) -> tuple[Any, str]:
        """The task's blob as a try's argument: the bytes themselves when small (Ray inlines
        them in the task: no object to fetch, and no dependency, so every such try has one
        scheduling key and a worker's lease goes straight to the next try), else one object
        (``ray.put`` once; Ray fetches it to the node while the try waits for a slot)."""
        key = (str(task.path), task.digest)
        if key not in self.blobs:
            import ray

            blob, model = shipping.pack_task(task)
            self.blobs[key] = (task_argument(blob, ray.put), model)
        return self.blobs[key]

    def submit(self, steps: list[PlannedTrial], tries: list[int], infra_left: int,
               unit: _Unit | None = None, run: int = 0) -> None:
        records = []
        for p, n in zip(steps, tries, strict=True):
            rec = TrialRecord(id=p.trial_id, run_id=self.run_id, config_id=p.config.record.id,
                              task_id=p.task.id, attempt=p.attempt, try_number=n)
            if unit is not None:
                assert p.task.scenario is not None
                rec.extra = {"scenario": p.task.scenario.id, "position": p.task.scenario_position,
                             "scenario_run": run, "category": p.task.category}
            records.append(rec)
        if unit is not None:
            _supersede(self.store, unit.tries, run)
        req = self.prepared.request
        blobs = [self._blob(p.task) for p in steps]
        job = ray_node.NodeJob(run_id=self.run_id, store_url=self.url, backend=req.backend,
                               config=steps[0].config.record, tasks=[m for _, m in blobs],
                               records=records, judge_model=req.judge_model,
                               record_bodies=req.record_bodies, models=self.files,
                               lease_ttl_s=LEASE_TTL_S, renew_every_s=RENEW_EVERY_S)
        ref = self.remote.remote(job.model_dump_json(), *[b for b, _ in blobs])
        self.in_flight[ref] = _Job(steps, records, infra_left, unit, run)

    async def loop(self) -> None:
        import ray

        next_check = time.monotonic() + LEASE_CHECK_S
        nodes_seen = time.monotonic()
        try:
            while self.in_flight:
                refs = list(self.in_flight)
                ready, rest = await asyncio.to_thread(ray.wait, refs, num_returns=1, timeout=WAIT_S)
                if ready and rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                for ref in ready:
                    job = self.in_flight.pop(ref)
                    self._collect(job, ref)
                if time.monotonic() >= next_check:
                    self._close_expired()
                    next_check = time.monotonic() + LEASE_CHECK_S
                    if slot_nodes():
                        nodes_seen = time.monotonic()
                    elif time.monotonic() - nodes_seen > NO_NODES_S:
                        raise ClusterError(
                            f"no node declaring {SLOTS} has been alive for {NO_NODES_S:.0f} s; "
                            f"the run stops here: resume it once nodes are back")
        except BaseException:  # Ctrl-C, SIGTERM, a bug: stop the cluster's work on this run
            for ref, job in list(self.in_flight.items()):
                _cancel(ref)
                self.store.close_trials(self.run_id, [r.id for r in job.records], INTERRUPTED)
            self.in_flight.clear()
            raise

    def _collect(self, job: _Job, ref: Any) -> None:
        import ray

        try:
            result_json, blob = ray.get(ref)
            result = ray_node.NodeResult.model_validate_json(result_json)
        except Exception as e:  # ray.exceptions.RayError: the worker or its node died
            self._lost(job, _failure(e))
            return
        try:
            shipping.unpack_dir(blob, self.store.run_dir(self.run_id))
        except (tarfile.TarError, OSError) as e:  # noted on the tries (as their node)
            for rec in result.records:
                rec.extra.setdefault("artifact_problems", []).append(
                    f"artifacts from node {result.node}: {e}")
                if rec.id not in result.fenced:
                    self.store.save_trial(rec)
        if result.error is not None:
            self._lost(job, f"node {result.node}: {result.error}")
            return
        if result.fenced:  # closed here meanwhile: the store's verdict stands
            self._lost(job, f"node {result.node}: {ray_node.FENCED}")
            return
        self._finished(job, result.records, result.build_error)

    def _lost(self, job: _Job, why: str) -> None:
        """Close the job's tries (spending kept) unless the node finished them first."""
        self.store.close_trials(self.run_id, [r.id for r in job.records], why)
        recs = []
        for rec in job.records:
            stored = self.store.get_trial(self.run_id, rec.id, rec.try_number)
            if stored is None:  # never started on its node
                rec.status, rec.error = TrialStatus.INFRA_INVALID, why
                self.store.save_trial(rec)
                stored = rec
            recs.append(stored)
        self._finished(job, recs, None)

    def _close_expired(self) -> None:
        closed = self.store.close_expired_trials(
            self.run_id, "node lost: its lease lapsed (the node stopped renewing it)")
        keys = {(r.id, r.try_number) for r in closed}
        for ref, job in list(self.in_flight.items()):
            if any((r.id, r.try_number) in keys for r in job.records):
                _cancel(ref)
                del self.in_flight[ref]
                self._lost(job, "node lost: its lease lapsed (the node stopped renewing it)")

    def _finished(self, job: _Job, recs: list[TrialRecord], build_error: str | None) -> None:
        progress = self.progress
        progress.spend_usd += sum(r.cost_usd or 0.0 for r in recs)
        if build_error is not None:
            self.build_failures.add(build_error)
            progress.build_failures = sorted(self.build_failures)
        elif job.infra_left > 0 and any(r.status is TrialStatus.INFRA_INVALID for r in recs):
            if self.on_progress:
                self.on_progress(progress, recs[0])
            if job.unit is not None:
                for ts, rec in zip(job.unit.tries, recs, strict=True):
                    ts.append(rec)
                self.submit(job.steps, [r.try_number + 1 for r in recs], job.infra_left - 1,
                            job.unit, job.run + 1)
            else:
                self.submit(job.steps, [recs[0].try_number + 1], job.infra_left - 1)
            return
        for rec in recs:
            progress.count(rec)
            if self.on_progress:
                self.on_progress(progress, rec)


def task_argument(blob: bytes, put: Callable[[bytes], Any]) -> Any:
    """What a try carries of its task's blob: the bytes up to ``INLINE_BLOB_BYTES``, else
    ``put(blob)`` (an object ref: Ray fetches it to the node before the try starts)."""
    return blob if len(blob) <= INLINE_BLOB_BYTES else put(blob)


def _failure(e: BaseException) -> str:
    """Why a Ray task gave no result, in one line: its worker or node died, or it failed."""
    from ray import exceptions as rx

    text = " ".join(str(e).split())
    died = (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.OwnerDiedError,
            rx.LocalRayletDiedError, rx.TaskCancelledError, rx.OutOfMemoryError)
    if isinstance(e, died):
        return f"node died ({type(e).__name__}): {text.split('. ')[0][:240]}"
    if isinstance(e, rx.RayTaskError):
        return f"the node's task failed: {one_line(e)}"
    return f"the node's task failed ({type(e).__name__}): {text[:240]}"


def _cancel(ref: Any) -> None:
    import ray

    with contextlib.suppress(Exception):  # already finished, or its node is gone
        ray.cancel(ref, force=True)


async def settle_leases(store: Store, run_id: str, on_prepare: PrepareCallback | None = None,
                        poll_s: float = 1.0) -> None:
    """Before a resume: close the tries whose lease lapsed (as interrupted: the driver died, not
    the node) and wait for the live ones to end or lapse; never close a live lease."""
    while True:
        store.close_expired_trials(run_id, INTERRUPTED)
        live = [t for t in store.incomplete_trials(run_id) if t.lease_owner is not None]
        if not live:
            return
        if on_prepare:
            on_prepare(f"waiting for {len(live)} tries still leased by nodes to end or lapse "
                       f"(at most {LEASE_TTL_S:.0f} s)")
        await asyncio.sleep(poll_s)


async def execute(cluster: Cluster, store: Store, run_id: str, prepared: PreparedRun, *,
                  on_progress: ProgressCallback | None = None,
                  on_prepare: PrepareCallback | None = None) -> RunProgress:
    req = prepared.request
    await settle_leases(store, run_id, on_prepare)
    store.close_incomplete_trials(run_id, INTERRUPTED)  # unleased: a local runner's
    plan = build_plan(prepared.configs, prepared.tasks, req.attempts)
    pending = pending_work(store, run_id, plan, req.max_infra_retries)
    if on_progress:
        on_progress(pending.progress, None)
    driver = _Driver(cluster, store, run_id, prepared, pending.progress, on_progress)
    for p, n, left in pending.trials:
        driver.submit([p], [n], left)
    for unit, run, left in pending.scenarios:
        driver.submit(unit.steps, [(ts[-1].try_number + 1) if ts else 0 for ts in unit.tries],
                      left, unit, run)
    await driver.loop()
    return driver.progress

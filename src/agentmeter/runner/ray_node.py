"""The node side of the Ray executor: one try (or one run of a scenario) in a Ray worker process.

A node runs its tries with its own sandbox backend (its cached bases and layers, built on
demand, file-locked as on one machine), its own gateway (provider keys from the node's own
environment: never in the payload, never in the store) and the shared store (the PostgreSQL URL
in the payload). Each try is held with a lease (``Store.renew_leases``) renewed from a thread
every ``renew_every_s``; every write of the try is fenced by the owner id
``"<hostname>:<ray node id>:<pid>"``: once the driver has closed the try (its node thought dead,
its lease expired) the node's writes are refused and the node stops working on it.

Artifacts are written under a scratch runs directory with the store's relative paths and go
back to the driver as one tar blob (``runner/shipping.py``). What the worker process keeps
between jobs, its event loop and the sweeping of scratch directories, is
``runner/node_worker.py``. Nothing here imports ray at import
time: the driver wraps :func:`run_job` and :func:`probe` as Ray tasks.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from agentmeter.agents.base import Agent
from agentmeter.agents.registry import make_agent
from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.paths import cache_dir
from agentmeter.pricing import PriceBook
from agentmeter.records import ConfigRecord, TrialRecord, TrialStatus
from agentmeter.runner import node_worker, shipping, sidecars
from agentmeter.runner.scenario import ScenarioRunner
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.runner.trial import GATEWAY_LIMITS, TrialContext, TrialRunner
from agentmeter.sandbox import registry as sandbox_registry
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.sandbox.spec import SandboxError, SandboxSpec
from agentmeter.store.db import Store
from agentmeter.tasks.models import Task

#: the error of a try whose store write was refused: someone else closed it
FENCED = "fenced: the try was closed by the driver (its node was thought dead or its lease lapsed)"


class ModelFiles(BaseModel):
    """The run's models and price files, by content (the driver's paths mean nothing here)."""

    models_toml: str | None = None
    prices: list[str] = Field(default_factory=list)
    allow_unpriced: bool = False


class NodeJob(BaseModel):
    """What a node runs: one try, or one run of a scenario (its steps in order)."""

    run_id: str
    store_url: str
    backend: str
    config: ConfigRecord
    #: per step: the task's model as JSON, its paths relative to the step's shipped blob
    tasks: list[str]
    records: list[TrialRecord]
    judge_model: str | None = None
    record_bodies: bool = False
    models: ModelFiles = Field(default_factory=ModelFiles)
    lease_ttl_s: float = 30.0
    renew_every_s: float = 5.0


class NodeResult(BaseModel):
    owner: str
    node: str
    records: list[TrialRecord]
    #: trial ids whose writes the store refused (closed by someone else)
    fenced: list[str] = Field(default_factory=list)
    #: the environment (or the agent's install) did not build: rerunning fails the same way
    build_error: str | None = None
    #: the job failed before or around its tries (e.g. the store could not be reached)
    error: str | None = None


class NodeProbe(BaseModel):
    node: str
    hostname: str
    version: str
    problems: list[str] = Field(default_factory=list)


# --- per worker process: the store's engine and the sandbox backend, made once ---------------

_stores: dict[str, Store] = {}
_backends: dict[str, SandboxBackend] = {}
#: environments (task version, agent version) this process found built
_built: set[tuple[str, str, str, str | None]] = set()
#: shipped tasks this process unpacked, by (blob digest, model JSON): a frozen model, shared by
#: the task's tries as the local executor shares its Task
_tasks: dict[tuple[str, str], Task] = {}


#: per store URL: the database's clock and this process's monotonic clock read together
_clocks: dict[str, tuple[float, datetime]] = {}
#: how long a reading of the database's clock is extrapolated on the monotonic clock
CLOCK_EVERY_S = 60.0


def _db_now(url: str, store: Store) -> datetime:
    """The database's clock, read at most every ``CLOCK_EVERY_S`` and carried forward on this
    process's monotonic clock in between (a lease's first expiry is off by the drift of a minute,
    milliseconds against its 30 s; renewals use the database's clock itself)."""
    mono = time.monotonic()
    seen = _clocks.get(url)
    if seen is None or mono - seen[0] > CLOCK_EVERY_S:
        seen = _clocks[url] = (mono, store.clock())
    return seen[1] + timedelta(seconds=mono - seen[0])


def _store(url: str) -> Store:
    if url not in _stores:
        _stores[url] = Store.open(url)
    return _stores[url]


async def _backend(name: str) -> SandboxBackend:
    if name not in _backends:
        backend = sandbox_registry.make_backend(name)
        await backend.cleanup_stale()  # sandboxes of dead workers of this node
        node_worker.remove_stale_scratch()
        _backends[name] = backend
    return _backends[name]


def _shipped_task(blob: bytes, model_json: str, cache: Path) -> Task:
    """The shipped task (``shipping.unpack_task``), parsed once per worker process while its
    unpacked files are in the node's cache."""
    key = (shipping.blob_digest(blob), model_json)
    task = _tasks.get(key)
    if task is None or not (cache / key[0] / ".complete").exists():
        if len(_tasks) >= 1024:  # a long-lived worker of a large grid: start over
            _tasks.clear()
        task = _tasks[key] = shipping.unpack_task(blob, model_json, cache)
    return task


def node_id() -> str:
    """This Ray node's id; "local" outside a Ray worker (asking Ray there would start one)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return "local"
    return str(ray.get_runtime_context().get_node_id())


def owner_id() -> str:
    return f"{socket.gethostname()}:{node_id()}:{os.getpid()}"


def _gateway(models: ModelFiles, scratch: Path, bodies: Path | None) -> Gateway:
    registry = ModelRegistry()
    if models.models_toml is not None:
        path = scratch / "models.toml"
        path.write_text(models.models_toml)
        registry = ModelRegistry.load(path)
    prices = PriceBook()
    if models.prices:
        paths = []
        for i, text in enumerate(models.prices):
            paths.append(scratch / f"prices-{i}.toml")
            paths[-1].write_text(text)
        prices = PriceBook.load(paths)
    return Gateway(registry, prices, record_bodies_dir=bodies, allow_unpriced=models.allow_unpriced,
                   limits=GATEWAY_LIMITS)


class _OwnedStore(Store):
    """The shared store as one owner sees it: every try write fenced; which tries are live
    (saved not final by this owner), so the renewer renews only those."""

    def __init__(self, base: Store, runs_dir: Path, owner: str) -> None:
        super().__init__(base.engine, runs_dir, base.where)
        self.owner = owner
        self.live: set[str] = set()
        self.fenced: set[str] = set()
        self.lock = threading.Lock()

    def save_trial(self, trial: TrialRecord, *, owner: str | None = None) -> bool:
        trial.lease_owner = self.owner
        with self.lock:
            ok = super().save_trial(trial, owner=self.owner)
            if not ok:
                self.fenced.add(trial.id)
                self.live.discard(trial.id)
            elif trial.status.final:
                self.live.discard(trial.id)
            else:
                self.live.add(trial.id)
        return ok


class _Renewer(threading.Thread):
    """Renews the owner's live leases; cancels the job when one is refused (fenced)."""

    def __init__(self, store: _OwnedStore, run_id: str, job: NodeJob,
                 loop: asyncio.AbstractEventLoop, task: asyncio.Future[list[TrialRecord]]) -> None:
        super().__init__(daemon=True, name="agentmeter-lease")
        self.store, self.run_id, self.job, self.loop, self.task = store, run_id, job, loop, task
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.job.renew_every_s):
            try:
                with self.store.lock:
                    live = sorted(self.store.live)
                    lost = self.store.renew_leases(self.run_id, live, self.store.owner,
                                                   self.job.lease_ttl_s)
                    self.store.fenced.update(lost)
            except Exception:  # a store blip: try again; a lapsed lease ends in the fence
                continue
            if lost:
                self.loop.call_soon_threadsafe(self.task.cancel)
                return


def run_job(job_json: str, *blobs: bytes) -> tuple[str, bytes]:
    """A Ray task: run the job; (NodeResult as JSON, the artifacts' tar blob)."""
    job = NodeJob.model_validate_json(job_json)
    owner = owner_id()
    node_worker.sweeper.bound()
    scratch = node_worker.new_scratch()
    try:
        try:
            result = node_worker.run_async(_run(job, list(blobs), owner, scratch))
        except Exception as e:  # the harness never crashes on its own errors: the driver retries
            result = NodeResult(owner=owner, node=node_id(), records=job.records,
                                error=f"{type(e).__name__}: {e}"[:2000])
        return result.model_dump_json(), shipping.pack_dir(scratch / "runs" / job.run_id)
    finally:
        node_worker.sweeper.discard(scratch)  # removed off the critical path


async def _run(job: NodeJob, blobs: list[bytes], owner: str, scratch: Path) -> NodeResult:
    cache = cache_dir() / "ray-tasks"
    tasks = [_shipped_task(b, t, cache) for b, t in zip(blobs, job.tasks, strict=True)]
    store = _OwnedStore(_store(job.store_url), scratch, owner)
    backend = await _backend(job.backend)
    cfg = job.config
    agent = make_agent(cfg.agent.name, cfg.agent.version, dict(cfg.agent.options))
    # the store's clock, not ours
    expires = _db_now(job.store_url, store) + timedelta(seconds=job.lease_ttl_s)
    for rec in job.records:
        rec.lease_owner, rec.lease_expires_at, rec.owner_pid = owner, expires, os.getpid()
    gateway: Gateway | None = None
    if agent.uses_model or job.judge_model is not None:
        bodies = store.run_dir(job.run_id) / "bodies" if job.record_bodies else None
        gateway = _gateway(job.models, scratch, bodies)
        await gateway.start(private_socket=True, host="127.0.0.1", port=0)
    result = NodeResult(owner=owner, node=node_id(), records=job.records)
    try:
        build_error = await _build(backend, tasks[0], agent, gateway)
        if build_error is not None:
            for rec in job.records:
                rec.status, rec.error = TrialStatus.INFRA_INVALID, build_error
                store.save_trial(rec)
            result.build_error = build_error
        else:
            ctx = TrialContext(store=store, run_id=job.run_id, backend=backend, gateway=gateway,
                               judge_model=job.judge_model)

            async def work() -> list[TrialRecord]:
                if tasks[0].scenario is None:
                    return [await TrialRunner(ctx, cfg, agent, tasks[0], job.records[0]).run()]
                steps = list(zip(tasks, job.records, strict=True))
                return await ScenarioRunner(ctx, cfg, agent, steps).run()

            running = asyncio.ensure_future(work())
            renewer = _Renewer(store, job.run_id, job, asyncio.get_running_loop(), running)
            renewer.start()
            try:
                result.records = await running
            except asyncio.CancelledError:
                if not store.fenced:
                    raise
            finally:
                renewer.stop.set()
    finally:
        if gateway is not None:
            await gateway.stop()
    result.fenced = sorted(store.fenced)
    for rec in result.records:
        if rec.id in store.fenced:
            rec.status, rec.error = TrialStatus.INFRA_INVALID, FENCED
    return result


async def _build(backend: SandboxBackend, task: Task, agent: Agent,
                 gateway: Gateway | None) -> str | None:
    """Build (or find cached, waiting on a build under way) the agent's install and the task's
    environment on this node; the error when one does not build."""
    key = (task.id, task.digest, agent.name, agent.version)
    if key in _built:
        return None
    if agent.layers():
        try:
            await backend.prepare(SandboxSpec(base=task.base, layers=tuple(agent.layers())))
        except SandboxError as e:
            return f"agent install failed ({agent.name}@{agent.version}): {e}"
    try:
        await backend.prepare(sandbox_spec(task, agent, gateway))
        await sidecars.prepare(backend, task)  # compose services (runner/sidecars.py)
    except SandboxError as e:
        return f"environment build failed: {e}"
    _built.add(key)
    return None


def probe(backend: str, store_url: str, models: list[str], files: ModelFiles,
          judge_model: str | None) -> str:
    """A Ray task pinned to one node before a run: can it run trials? (NodeProbe as JSON)."""
    import agentmeter

    result = NodeProbe(node=node_id(), hostname=socket.gethostname(),
                       version=agentmeter.__version__)
    try:  # kept: this worker process runs the run's first try warm
        node_worker.run_async(_backend(backend))
    except Exception as e:
        result.problems.append(f"{backend} sandboxes are not available: {e}")
    try:
        _store(store_url).schema_version()
    except Exception as e:
        _stores.pop(store_url, None)
        result.problems.append(f"store: {e}")
    if models or judge_model is not None:
        with tempfile.TemporaryDirectory(prefix="agentmeter-probe-") as tmp:
            try:
                gw = _gateway(files, Path(tmp), None)
                for m in [*models, *([judge_model] if judge_model else [])]:
                    gw.check_model(m)
            except Exception as e:
                result.problems.append(f"models: {e}")
    return result.model_dump_json()

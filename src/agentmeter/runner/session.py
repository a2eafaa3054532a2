"""A run from request to stored results: validate everything, open the store, start the gateway
and the sandbox backend, execute the plan, close cleanly (also on Ctrl-C). Which tasks a run can
run, and on what network: runnable.py."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.gateway.registry import UpstreamModel
from agentmeter.pricing import PriceBook
from agentmeter.records import ConfigRecord, RunRecord
from agentmeter.runner import ray_cluster, ray_executor
from agentmeter.runner.executor import PrepareCallback, ProgressCallback, RunProgress, execute
from agentmeter.runner.lock import RunLockedError, run_lock
from agentmeter.runner.plan import PlannedConfig, build_configs, build_plan
from agentmeter.runner.runnable import NetworkDefault, host_network, local_problems, with_network_default
from agentmeter.runner.trial import GATEWAY_LIMITS, TrialContext
from agentmeter.sandbox import registry as sandbox_registry
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.sandbox.spec import SandboxError
from agentmeter.store.artifacts import RUN_ID_PATTERN
from agentmeter.store.db import Store
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import SkippedTask, Suite, combine_suites, load_suites
from agentmeter.tomlfile import read_toml, validate_toml


class RunRequest(BaseModel):
    """What to run. Stored with the run so ``resume`` can rebuild the same plan."""

    suites: list[str] = Field(default_factory=lambda: ["starter"])
    #: datasets of Harbor's registry, ``NAME`` or ``NAME@VERSION`` (``-d``), fetched into the
    #: cache (``tasks/datasets.py``); run with the suites
    datasets: list[str] = Field(default_factory=list)
    #: the registry the datasets come from: a ``registry.json`` URL or file (``--registry``);
    #: None: Harbor's
    registry: str | None = None
    subset: str | None = None
    task_ids: list[str] = Field(default_factory=list)
    agents: list[str] = Field(default_factory=lambda: ["oracle"])
    models: list[str] = Field(default_factory=list)
    #: explicit (agent, model) configurations, in addition to the agents x models grid
    pairs: list[tuple[str, str]] = Field(default_factory=list)
    agent_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    attempts: int = Field(default=1, ge=1)
    concurrency: int = Field(default=2, ge=1)
    backend: str = "local"
    max_infra_retries: int = Field(default=2, ge=0)
    models_file: str | None = None
    prices: list[str] = Field(default_factory=list)
    allow_unpriced: bool = False
    record_bodies: bool = False
    #: the model verifiers grade with (judges), metered as evaluation cost; None: no judge
    judge_model: str | None = None
    #: refuse the run when any task fails to load (else such tasks are skipped and listed)
    strict: bool = False
    #: exact allowed_hosts entries may reach the host's own or internal addresses
    #: (``--allow-host-network``); without it a task listing one is refused when it loads
    allow_host_network: bool = False
    #: the network of a task that states none (``--network-default``): ``public`` (Harbor's
    #: default, through the harness's proxy, never the host) or ``none``; a task that states its
    #: network keeps it
    network_default: NetworkDefault = "public"
    #: where trials run: this machine (``runner/executor.py``) or a Ray cluster's nodes
    #: (``runner/ray_executor.py``; the store must then be PostgreSQL)
    executor: Literal["local", "ray"] = "local"
    #: the Ray cluster: ``auto`` (this machine's, or $RAY_ADDRESS), ``host:port``, ``ray://host:port``
    ray_address: str = Field(default="auto", min_length=1)


class RunSetupError(Exception):
    """The request cannot run (bad task, agent, model or store); nothing was written."""


def make_request(**fields: Any) -> RunRequest:
    """A RunRequest from command-line values; a bad value is one line naming its option."""
    try:
        return RunRequest.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        option = "--" + "-".join(str(p) for p in first["loc"]).replace("_", "-")
        raise RunSetupError(f"{option}: {first['msg'].lower()} (got {first.get('input')!r})") from None


@dataclass
class PreparedRun:
    request: RunRequest
    tasks: list[Task]
    configs: list[PlannedConfig]
    suite_name: str
    #: selected tasks that failed to load or cannot run on the backend, and why
    skipped: list[SkippedTask] = field(default_factory=list)


class GridFile(BaseModel):
    """A grid TOML file: ``agents`` x ``models``, explicit ``[[pairs]]``, ``[agent_options.NAME]``."""

    model_config = ConfigDict(extra="forbid")

    agents: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    pairs: list[dict[str, str]] = Field(default_factory=list)
    agent_options: dict[str, dict[str, Any]] = Field(default_factory=dict)


def load_grid(path: Path) -> GridFile:
    """Parse a grid file; errors name the file and the field."""
    grid = validate_toml(GridFile, read_toml(path, RunSetupError), path, RunSetupError)
    for i, pair in enumerate(grid.pairs):
        if set(pair) != {"agent", "model"}:
            raise RunSetupError(f"{path}: pairs[{i}]: needs exactly the keys 'agent' and 'model'")
    return grid


def prepare(request: RunRequest) -> PreparedRun:
    """Validate everything a run needs before anything is written."""
    from agentmeter.agents.registry import UnknownAgentError
    from agentmeter.tasks.errors import TaskError

    try:
        suite = load_sources(request)
        tasks = list(suite.select(request.subset, request.task_ids or None))
    except (TaskError, KeyError, ValueError) as e:
        raise RunSetupError(str(e)) from e
    skipped = [] if request.task_ids else suite.skipped_in(request.subset)
    tasks = with_network_default(tasks, request.network_default)
    tasks, refused = host_network(tasks, request.allow_host_network)
    if refused and request.strict:
        raise RunSetupError("\n".join(refused.values()))
    skipped += [SkippedTask(id=t.id, path=t.path, problems=(refused[t.id],))
                for t in tasks if t.id in refused]
    tasks = [t for t in tasks if t.id not in refused]
    unknown_backend = sandbox_registry.backend_problem(request.backend)
    if unknown_backend is not None:
        raise RunSetupError(unknown_backend)
    if request.backend == "local":
        unbuildable = local_problems(tasks)
        if unbuildable and request.strict:
            raise RunSetupError("\n".join(f"task {i}: {why}" for i, why in unbuildable.items()))
        skipped += [SkippedTask(id=t.id, path=t.path, problems=(unbuildable[t.id],))
                    for t in tasks if t.id in unbuildable]
        tasks = [t for t in tasks if t.id not in unbuildable]
    if not tasks:
        if skipped:
            raise RunSetupError("no task can run; skipped:\n" + "\n".join(
                f"  - {k.id}: {k.reason}" for k in skipped))
        raise RunSetupError("no tasks selected")
    try:
        configs = build_configs(request.agents, request.models, request.agent_options,
                                request.pairs)
    except (UnknownAgentError, ValueError) as e:
        raise RunSetupError(str(e)) from e
    if request.judge_model is not None:
        check_judge_model(request)
    if any(c.agent.uses_model for c in configs):
        registry, prices = models_and_prices(request)
        gw = Gateway(registry, prices, allow_unpriced=request.allow_unpriced)
        resolved = []
        for c in configs:
            if c.agent.uses_model:
                try:
                    um = _check_model(gw, c.record.model.name, request)
                except Exception as e:
                    raise RunSetupError(str(e)) from e
                # the stored configuration says which wire API and price key it ran with
                c = PlannedConfig(ConfigRecord.of(c.record.agent, um.spec()), c.agent)
            resolved.append(c)
        configs = resolved
    return PreparedRun(request, tasks, configs, suite.name, skipped)


def load_sources(request: RunRequest) -> Suite:
    """The request's suites and datasets, as one suite."""
    from agentmeter.tasks.datasets import DatasetError, load_dataset

    suites = [load_suites(request.suites, strict=request.strict)] if request.suites else []
    try:
        suites += [load_dataset(d, request.registry, strict=request.strict)
                   for d in request.datasets]
    except DatasetError as e:
        raise RunSetupError(str(e)) from e
    if not suites:
        raise RunSetupError("no suite or dataset given")
    return combine_suites(suites)


def needs_gateway(prepared: PreparedRun) -> bool:
    """A run starts the gateway when an agent or the judge uses a model."""
    return prepared.request.judge_model is not None or any(
        c.agent.uses_model for c in prepared.configs)


def check_judge_model(request: RunRequest) -> None:
    """The judge model resolves, has its key and a price (unless unpriced runs are allowed)
    and speaks an API the judge client uses: one clear error before anything is written."""
    from agentmeter.runner.judging import judge_api

    assert request.judge_model is not None
    registry, prices = models_and_prices(request)
    gw = Gateway(registry, prices, allow_unpriced=request.allow_unpriced)
    try:
        judge_api(_check_model(gw, request.judge_model, request))
    except Exception as e:
        raise RunSetupError(f"--judge-model: {e}") from e


def _check_model(gw: Gateway, model: str, request: RunRequest) -> UpstreamModel:
    """The model resolved, with a price unless unpriced runs are allowed, and with its key in
    this environment, unless trials run on a cluster: each node's own keys (probed there)."""
    if request.executor == "local":
        return gw.check_model(model)
    um = gw.models.resolve(model)
    gw.prices.require([um.price_key], allow_unpriced=request.allow_unpriced)
    return um


async def start_local_models(gateway: Gateway, prepared: PreparedRun) -> None:
    """The run's ``local/`` models (agents' and the judge's) served before its trials start:
    one llama.cpp server each, shared by all trials and judges, stopped with the gateway."""
    from agentmeter.gateway.localmodels import LocalModelError

    names = [c.record.model.name for c in prepared.configs if c.agent.uses_model]
    if prepared.request.judge_model is not None:
        names.append(prepared.request.judge_model)
    try:
        await gateway.start_local_models(names)
    except BaseException as e:  # a server that did start is stopped too (also on Ctrl-C)
        await gateway.stop()
        if isinstance(e, LocalModelError):
            raise RunSetupError(str(e)) from e
        raise


def models_and_prices(request: RunRequest) -> tuple[ModelRegistry, PriceBook]:
    try:
        registry = ModelRegistry.load(Path(request.models_file)) if request.models_file else ModelRegistry()
        prices = PriceBook.load([Path(p) for p in request.prices]) if request.prices else PriceBook()
    except Exception as e:
        raise RunSetupError(str(e)) from e
    return registry, prices


def make_backend(name: str, log: Callable[[str], None] | None = None) -> SandboxBackend:
    """The sandbox backend by name; an unknown name or a host that cannot provide it is a
    setup error."""
    try:
        return sandbox_registry.make_backend(name, log)
    except sandbox_registry.UnknownBackendError as e:
        raise RunSetupError(str(e)) from e
    except SandboxError as e:
        raise RunSetupError(f"{name} sandboxes are not available here: {e}") from e


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """A run id names a directory: refuse one that could leave the runs directory."""
    if not RUN_ID_PATTERN.match(run_id):
        raise RunSetupError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-', "
                            "starting with a letter or digit (it names a directory)")
    return run_id


async def run(store: Store, prepared: PreparedRun, run_id: str | None = None, *,
              backend: SandboxBackend | None = None,
              on_progress: ProgressCallback | None = None,
              on_prepare: PrepareCallback | None = None,
              log: Callable[[str], None] | None = None) -> tuple[str, RunProgress]:
    """Create (or continue) the run ``run_id`` and execute its plan, holding the run's lock
    (a run already running in a live process is refused with RunSetupError)."""
    run_id = check_run_id(run_id or new_run_id())
    executor = _make_executor(store, prepared, backend, log)  # before anything is written
    try:
        with run_lock(store, run_id):
            return await _run_locked(store, prepared, run_id, executor, on_progress, on_prepare)
    except RunLockedError as e:
        raise RunSetupError(str(e)) from None
    finally:
        executor.close()


class Executor:
    """Where a run's trials run: this machine's sandboxes (the default)."""

    def __init__(self, backend: SandboxBackend) -> None:
        self.backend = backend

    async def execute(self, store: Store, prepared: PreparedRun, run_id: str,
                      on_progress: ProgressCallback | None,
                      on_prepare: PrepareCallback | None) -> RunProgress:
        req = prepared.request
        gateway: Gateway | None = None
        if needs_gateway(prepared):
            registry, prices = models_and_prices(req)
            bodies = store.run_dir(run_id) / "bodies" if req.record_bodies else None
            gateway = Gateway(registry, prices, record_bodies_dir=bodies,
                              allow_unpriced=req.allow_unpriced, limits=GATEWAY_LIMITS)
            await gateway.start(private_socket=True, host="127.0.0.1", port=0)
            await start_local_models(gateway, prepared)
        ctx = TrialContext(store=store, run_id=run_id, backend=self.backend, gateway=gateway,
                           judge_model=req.judge_model)
        plan = build_plan(prepared.configs, prepared.tasks, req.attempts)
        interrupted = False
        try:
            return await execute(ctx, plan, concurrency=req.concurrency,
                                 max_infra_retries=req.max_infra_retries,
                                 on_progress=on_progress, on_prepare=on_prepare)
        except asyncio.CancelledError:
            interrupted = True
            raise
        finally:
            if gateway is not None:  # calls under way: waited for, or (Ctrl-C) cancelled at
                await gateway.stop(drain_s=0.0 if interrupted else None)  # once, each stored

    def close(self) -> None:
        pass


class RayExecutor(Executor):
    """A Ray cluster's nodes, each with its own sandboxes and gateway (runner/ray_executor.py)."""

    def __init__(self, cluster: ray_cluster.Cluster) -> None:
        self.cluster = cluster

    async def execute(self, store: Store, prepared: PreparedRun, run_id: str,
                      on_progress: ProgressCallback | None,
                      on_prepare: PrepareCallback | None) -> RunProgress:
        try:
            return await ray_executor.execute(self.cluster, store, run_id, prepared,
                                              on_progress=on_progress, on_prepare=on_prepare)
        except ray_cluster.ClusterError as e:  # the cluster went away mid-run
            raise RunSetupError(str(e)) from None

    def close(self) -> None:
        self.cluster.close()


def _local_executor(store: Store, prepared: PreparedRun, backend: SandboxBackend | None,
                    log: Callable[[str], None] | None) -> Executor:
    return Executor(backend or make_backend(prepared.request.backend, log))


def _ray_executor(store: Store, prepared: PreparedRun, backend: SandboxBackend | None,
                  log: Callable[[str], None] | None) -> Executor:
    try:
        return RayExecutor(ray_cluster.connect(prepared.request.ray_address, store, prepared))
    except ray_cluster.ClusterError as e:
        raise RunSetupError(str(e)) from None


#: executors by ``RunRequest.executor``: each checks what it needs before anything is written
EXECUTORS: dict[str, Callable[[Store, PreparedRun, SandboxBackend | None,
                               Callable[[str], None] | None], Executor]] = {
    "local": _local_executor,
    "ray": _ray_executor,
}


def _make_executor(store: Store, prepared: PreparedRun, backend: SandboxBackend | None,
                   log: Callable[[str], None] | None) -> Executor:
    return EXECUTORS[prepared.request.executor](store, prepared, backend, log)


async def _run_locked(store: Store, prepared: PreparedRun, run_id: str, executor: Executor,
                      on_progress: ProgressCallback | None,
                      on_prepare: PrepareCallback | None) -> tuple[str, RunProgress]:
    req = prepared.request
    existing = store.get_run(run_id)
    if existing is None:
        store.create_run(RunRecord(id=run_id, backend=req.backend, attempts=req.attempts,
                                   concurrency=req.concurrency,
                                   settings={"request": req.model_dump(), "suite": prepared.suite_name,
                                             "skipped": [{"task": k.id, "reason": k.reason}
                                                         for k in prepared.skipped]}))
    else:
        store.update_run_status(run_id, "running")
    for c in prepared.configs:
        store.upsert_config(c.record, run_id=run_id)
    for t in prepared.tasks:
        store.upsert_task(t.to_record(prepared.suite_name), run_id=run_id)
    status = "interrupted"
    try:
        progress = await executor.execute(store, prepared, run_id, on_progress, on_prepare)
        status = "finished"
    finally:
        store.update_run_status(run_id, status,  # type: ignore[arg-type]
                                finished_at=datetime.now(UTC))
    return run_id, progress


def request_of(store: Store, run_id: str) -> RunRequest:
    rec = store.get_run(run_id)
    if rec is None:
        raise RunSetupError(f"no run {run_id!r} in {store.where}")
    try:
        return RunRequest.model_validate(rec.settings["request"])
    except (KeyError, ValueError) as e:
        raise RunSetupError(f"run {run_id} has no resumable request ({e})") from e

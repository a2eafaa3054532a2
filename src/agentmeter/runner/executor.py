"""The local asyncio executor: runs a plan with bounded concurrency, resumes, retries infra.

Resume rule: a trial whose latest try ended with a final status other than infra_invalid is never
run again; tries left ``running`` by a killed runner are closed as interrupted (their spending
kept) and rerun; infra_invalid tries are retried up to ``max_infra_retries`` times.

A scenario's steps (``runner/scenario.py``) run as one unit per configuration and attempt: the
unit is complete when every step's latest try is final, not infra_invalid, and from the same run
of the scenario (``extra["scenario_run"]``). Otherwise the whole scenario runs again from its
first step, as a new run; the finished steps of the unfinished run are first marked
``infra_invalid`` ("superseded"), so half a scenario never counts.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field

from agentmeter.records import TrialRecord, TrialStatus
from agentmeter.runner import sidecars
from agentmeter.runner.plan import PlannedTrial
from agentmeter.runner.scenario import ScenarioRunner
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.runner.trial import INTERRUPTED, TrialContext, TrialRunner
from agentmeter.sandbox.spec import SandboxError, SandboxSpec
from agentmeter.store.db import Store


@dataclass
class RunProgress:
    total: int
    done: int = 0
    passed: int = 0
    spend_usd: float = 0.0
    infra: int = 0
    skipped: int = 0
    results: list[TrialRecord] = field(default_factory=list)
    #: environments (or agent installs) that failed to build, each error once
    build_failures: list[str] = field(default_factory=list)

    def count(self, rec: TrialRecord, *, earlier: bool = False) -> None:
        """One trial done: run now, or (``earlier``) completed by an earlier run."""
        self.done += 1
        self.passed += rec.status is TrialStatus.PASSED
        if earlier:
            self.skipped += 1
        else:
            self.infra += rec.status is TrialStatus.INFRA_INVALID
        self.results.append(rec)


ProgressCallback = Callable[[RunProgress, TrialRecord | None], None]
PrepareCallback = Callable[[str], None]


async def prepare_environments(ctx: TrialContext, plan: list[PlannedTrial],
                               on_prepare: PrepareCallback | None = None) -> dict[str, str]:
    """Build (or find cached) every distinct environment once, before trials start, so
    concurrent trials never build the same layer twice. Returns spec key -> build error.

    Each agent's own install is built first, alone: a version that cannot be installed fails
    once, with the installer's last lines, instead of once per task."""
    errors: dict[str, str] = {}
    #: (agent, version, base) -> None when installed, else the install error
    installs: dict[tuple[str, str | None, str], str | None] = {}
    for p in plan:
        agent, base = p.config.agent, p.task.base
        akey = (agent.name, agent.version, base)
        if not agent.layers() or akey in installs:
            continue
        installs[akey] = None
        if on_prepare:
            on_prepare(f"agent {agent.name}" + (f"@{agent.version}" if agent.version else ""))
        try:
            await ctx.backend.prepare(SandboxSpec(base=base, layers=tuple(agent.layers())))
        except SandboxError as e:
            installs[akey] = f"agent install failed ({agent.name}@{agent.version}): {e}"
    seen: set[str] = set()
    for p in plan:
        key = _env_key(p)
        if key in seen:
            continue
        seen.add(key)
        failed = installs.get((p.config.agent.name, p.config.agent.version, p.task.base))
        if failed:
            errors[key] = failed
            continue
        spec = sandbox_spec(p.task, p.config.agent, ctx.gateway)
        if on_prepare:
            on_prepare(f"environment {p.task.id}" + (f" + {p.config.agent.name}"
                                                     if p.config.agent.layers() else ""))
        try:
            await ctx.backend.prepare(spec)
            await sidecars.prepare(ctx.backend, p.task)  # compose services (runner/sidecars.py)
        except SandboxError as e:
            errors[key] = f"environment build failed: {e}"
    return errors


def _env_key(p: PlannedTrial) -> str:
    return f"{p.task.id}\0{p.task.digest}\0{p.config.agent.name}\0{p.config.agent.version}"


def _next_try(latest: TrialRecord | None, max_infra_retries: int, infra_tries: int) -> int | None:
    """The try number to run next, or None when the trial is complete."""
    if latest is None:
        return 0
    if latest.status.final and latest.status is not TrialStatus.INFRA_INVALID:
        return None
    if latest.status is TrialStatus.INFRA_INVALID and infra_tries > max_infra_retries:
        return None
    return latest.try_number + 1


#: the error a finished step of an unfinished scenario run is given when the scenario restarts
SUPERSEDED = "superseded: its scenario run {run} did not finish; the scenario ran again"


@dataclass
class _Unit:
    """What the executor schedules: one trial, or one scenario's steps (in order)."""

    steps: list[PlannedTrial]
    #: per step: its tries so far, oldest first
    tries: list[list[TrialRecord]]

    @property
    def first(self) -> PlannedTrial:
        return self.steps[0]


def _units(plan: list[PlannedTrial], existing: dict[str, list[TrialRecord]]) -> list[_Unit]:
    units: list[_Unit] = []
    scenarios: dict[tuple[str, str, int], _Unit] = {}
    for p in plan:
        tries = sorted(existing.get(p.trial_id, []), key=lambda r: r.try_number)
        sc = p.task.scenario
        if sc is None:
            units.append(_Unit([p], [tries]))
            continue
        key = (p.config.record.id, sc.id, p.attempt)
        if key not in scenarios:
            scenarios[key] = _Unit([], [])
            units.append(scenarios[key])
        scenarios[key].steps.append(p)
        scenarios[key].tries.append(tries)
    for u in units:
        order = sorted(range(len(u.steps)), key=lambda i: u.steps[i].task.scenario_position or 0)
        u.steps, u.tries = [u.steps[i] for i in order], [u.tries[i] for i in order]
    return units


def _run_of(rec: TrialRecord) -> int:
    value = rec.extra.get("scenario_run")
    return value if isinstance(value, int) else 0


def _scenario_state(unit: _Unit) -> tuple[bool, int, int]:
    """(complete, the latest run number or -1, infra-ended runs so far)."""
    runs = {_run_of(r) for ts in unit.tries for r in ts}
    latest = max(runs, default=-1)
    complete = all(ts and ts[-1].status.final and ts[-1].status is not TrialStatus.INFRA_INVALID
                   and _run_of(ts[-1]) == latest for ts in unit.tries)
    infra = {_run_of(r) for ts in unit.tries for r in ts
             if r.status is TrialStatus.INFRA_INVALID and r.error != INTERRUPTED
             and not (r.error or "").startswith("superseded")}
    return complete, latest, len(infra)


@dataclass
class Pending:
    """What a run has left: the progress of what earlier runs completed, the trials to run
    (with their next try number and infra retries left) and the scenario units to run (with
    their next scenario run number and infra retries left)."""

    progress: RunProgress
    trials: list[tuple[PlannedTrial, int, int]]
    scenarios: list[tuple[_Unit, int, int]]


def pending_work(store: Store, run_id: str, plan: list[PlannedTrial],
                 max_infra_retries: int) -> Pending:
    """The resume rule (see the module's doc) applied to the run's stored tries (none of them
    may be left running: close those first)."""
    existing: dict[str, list[TrialRecord]] = {}
    for t in store.trials(run_id):
        existing.setdefault(t.id, []).append(t)
    progress = RunProgress(total=len(plan))
    todo: list[tuple[PlannedTrial, int, int]] = []
    scenario_todo: list[tuple[_Unit, int, int]] = []
    for unit in _units(plan, existing):
        if unit.first.task.scenario is not None:
            complete, latest_run, infra_runs = _scenario_state(unit)
            progress.spend_usd += sum(r.cost_usd or 0.0 for ts in unit.tries for r in ts)
            if complete or infra_runs > max_infra_retries:
                for ts in unit.tries:
                    if ts:
                        progress.count(ts[-1], earlier=True)
                    else:  # never tried, and its scenario's infra retries are used up
                        progress.done += 1
                        progress.skipped += 1
            else:
                scenario_todo.append((unit, latest_run + 1,
                                      max(0, max_infra_retries - infra_runs)))
            continue
        p, tries = unit.first, unit.tries[0]
        latest = tries[-1] if tries else None
        infra = sum(1 for r in tries if r.status is TrialStatus.INFRA_INVALID and r.error != INTERRUPTED)
        nxt = _next_try(latest, max_infra_retries, infra)
        progress.spend_usd += sum(r.cost_usd or 0.0 for r in tries)
        if nxt is None:
            assert latest is not None
            progress.count(latest, earlier=True)
        else:
            todo.append((p, nxt, max(0, max_infra_retries - infra)))
    return Pending(progress, todo, scenario_todo)


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; return the new soft
    limit. Each concurrent local trial holds ≈ 9-10 of the harness's descriptors (its
    keeper's, bridge's and execs' pipes, gateway connections: 599 measured at 64 concurrent
    codex trials, benchmarks/concurrency.py), so the common default soft limit of 1,024 ends
    a run of ≈ 100 concurrent trials with EMFILE, while the hard limit is usually far higher."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard  # the kernel's nr_open default
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


async def execute(ctx: TrialContext, plan: list[PlannedTrial], *, concurrency: int,
                  max_infra_retries: int = 2, on_progress: ProgressCallback | None = None,
                  on_prepare: PrepareCallback | None = None) -> RunProgress:
    store, run_id = ctx.store, ctx.run_id
    raise_fd_limit()
    store.close_incomplete_trials(run_id, INTERRUPTED)
    await ctx.backend.cleanup_stale()
    pending = pending_work(store, run_id, plan, max_infra_retries)
    progress, todo, scenario_todo = pending.progress, pending.trials, pending.scenarios
    if on_progress:
        on_progress(progress, None)
    build_errors = await prepare_environments(
        ctx, [t[0] for t in todo] + [u.first for u, _, _ in scenario_todo], on_prepare)
    progress.build_failures = sorted(set(build_errors.values()))

    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(p: PlannedTrial, try_number: int, infra_left: int) -> None:
        async with sem:
            while True:
                rec = TrialRecord(id=p.trial_id, run_id=run_id, config_id=p.config.record.id,
                                  task_id=p.task.id, attempt=p.attempt, try_number=try_number,
                                  owner_pid=os.getpid())
                build_error = build_errors.get(_env_key(p))
                if build_error is not None:  # rebuilding would fail the same way: no retry
                    rec.status, rec.error = TrialStatus.INFRA_INVALID, build_error
                    store.save_trial(rec)
                    break
                rec = await TrialRunner(ctx, p.config.record, p.config.agent, p.task, rec).run()
                progress.spend_usd += rec.cost_usd or 0.0
                if rec.status is TrialStatus.INFRA_INVALID and infra_left > 0:
                    infra_left -= 1
                    try_number += 1
                    if on_progress:
                        on_progress(progress, rec)
                    continue
                break
            progress.count(rec)
            if on_progress:
                on_progress(progress, rec)

    async def scenario(unit: _Unit, run: int, infra_left: int) -> None:
        async with sem:
            next_try = [(ts[-1].try_number + 1) if ts else 0 for ts in unit.tries]
            assert unit.first.task.scenario is not None
            sc_id = unit.first.task.scenario.id
            while True:
                _supersede(store, unit.tries, run)
                recs = [TrialRecord(id=p.trial_id, run_id=run_id, config_id=p.config.record.id,
                                    task_id=p.task.id, attempt=p.attempt, try_number=n,
                                    owner_pid=os.getpid(),
                                    extra={"scenario": sc_id,
                                           "position": p.task.scenario_position,
                                           "scenario_run": run, "category": p.task.category})
                        for p, n in zip(unit.steps, next_try, strict=True)]
                build_error = build_errors.get(_env_key(unit.first))
                if build_error is not None:
                    for rec in recs:
                        rec.status, rec.error = TrialStatus.INFRA_INVALID, build_error
                        store.save_trial(rec)
                    break
                p0 = unit.first.config
                recs = await ScenarioRunner(ctx, p0.record, p0.agent,
                                            [(p.task, r) for p, r in zip(unit.steps, recs,
                                                                         strict=True)]).run()
                progress.spend_usd += sum(r.cost_usd or 0.0 for r in recs)
                if any(r.status is TrialStatus.INFRA_INVALID for r in recs) and infra_left > 0:
                    infra_left -= 1
                    for ts, rec in zip(unit.tries, recs, strict=True):
                        ts.append(rec)
                    next_try = [n + 1 for n in next_try]
                    run += 1
                    if on_progress:
                        on_progress(progress, recs[0])
                    continue
                break
            for rec in recs:
                progress.count(rec)
                if on_progress:
                    on_progress(progress, rec)

    workers = [asyncio.create_task(one(p, n, left)) for p, n, left in todo]
    workers += [asyncio.create_task(scenario(u, r, left)) for u, r, left in scenario_todo]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:  # gather's own cancellation already reached them; never cancel twice
            if not w.done() and not w.cancelling():
                w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return progress


def _supersede(store: Store, tries: list[list[TrialRecord]], new_run: int) -> None:
    """Before a scenario runs again: its steps' finished tries from an earlier, unfinished run
    no longer count (their spending stays)."""
    for ts in tries:
        if ts and ts[-1].status.final and ts[-1].status is not TrialStatus.INFRA_INVALID \
                and _run_of(ts[-1]) < new_run:
            old = ts[-1]
            old.status, old.error = TrialStatus.INFRA_INVALID, SUPERSEDED.format(run=_run_of(old))
            store.save_trial(old)

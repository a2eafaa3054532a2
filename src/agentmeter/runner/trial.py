"""One trial: sandbox up, agent runs (through the gateway), verifier, result and artifacts.

Every outcome becomes a TrialRecord with a status from the taxonomy; the harness never lets an
agent's or a provider's behaviour crash it. Sandbox and harness failures are ``infra_invalid``.
The sandbox's spec is the task's (tasksandbox.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import traceback
from dataclasses import dataclass

from agentmeter.agents.base import Agent, AgentContext, AgentRun, AgentSession, GatewayEndpoint
from agentmeter.agents.reference import replay_script
from agentmeter.gateway import Budget, Gateway, GatewayLimits, ScriptedContext, TrialMeter
from agentmeter.gateway.metering import StoreSink
from agentmeter.records import (
    ConfigRecord,
    ModelCallRecord,
    PhaseTimings,
    TokenUsage,
    TrialRecord,
    TrialStatus,
    utcnow,
)
from agentmeter.runner import hooks, sidecars
from agentmeter.runner.network import (
    network_failure,
    network_label,
    network_source,
    unreachable_failure,
    verifier_network_label,
)
from agentmeter.runner.tasksandbox import (
    GATEWAY_PORT,
    phase_networks,
    sandbox_spec,
    staged_early,
)
from agentmeter.runner.verification import InfraError, TrialVerification
from agentmeter.sandbox.netswitch import set_network
from agentmeter.sandbox.protocol import Sandbox, SandboxBackend
from agentmeter.sandbox.spec import (
    AGENT_GID,
    AGENT_UID,
    AGENT_USER,
    ExecResult,
    SandboxError,
    agent_workdir_problem,
)
from agentmeter.store import leases
from agentmeter.store.db import Store
from agentmeter.tasks.models import Task
from agentmeter.verify.protocol import Verdict
from agentmeter.verify.registry import make_verifier

#: what each trial (and each sandbox's bridge) may hold of a run's gateway (docs/security.md)
GATEWAY_LIMITS = GatewayLimits()
#: how often a running agent's budget state is checked (seconds)
BUDGET_POLL_S = 0.5
#: how long an agent asked to stop (budget exhausted) may take to hand back its logs
STOP_GRACE_S = 60.0
#: the error of a try cut short by the runner stopping (not counted as an infra retry)
INTERRUPTED = "interrupted: the runner stopped before this try finished"



@dataclass
class TrialContext:
    """Everything a trial needs from the run."""

    store: Store
    run_id: str
    backend: SandboxBackend
    gateway: Gateway | None
    verbose_artifacts: bool = True
    #: the run's judge model (verifiers' model calls, metered as evaluation cost), if any
    judge_model: str | None = None


class TrialRunner(TrialVerification):
    """Runs one trial and stores every step of it."""

    def __init__(self, ctx: TrialContext, config: ConfigRecord, agent: Agent, task: Task,
                 record: TrialRecord) -> None:
        self.ctx = ctx
        self.config = config
        self.agent = agent
        self.task = task
        self.rec = record
        self.dir = ctx.store.artifact_dir(ctx.run_id, record.id, record.try_number)
        #: the seq the trial's next model call takes (agent and judge calls share the numbering)
        self.next_seq = 0
        #: what grading cost so far (a scenario step verifies once per round)
        self.judge_meters: list[TrialMeter] = []
        #: the hosts each phase's proxy refused or could not reach (who -> "host:port" -> why)
        self.blocked: dict[str, dict[str, str]] = {}
        #: seqs of agent calls still under way when their gateway trial closed (read by the
        #: sink on the gateway's writer thread)
        self._late: frozenset[int] = frozenset()

    def _save(self) -> None:
        written = self.ctx.store.save_trial(self.rec)
        if written and self.rec.extra.get(leases.IN_FLIGHT):
            self._settle_books()  # a late call may have been stored before this write

    def _settle_books(self) -> None:
        """The try's totals from its stored calls (it ended with calls under way)."""
        rec = self.rec
        settled = self.ctx.store.settle_books(self.ctx.run_id, rec.id, rec.try_number)
        if settled is not None:
            rec.usage, rec.cost_usd, rec.model_calls = \
                settled.usage, settled.cost_usd, settled.model_calls
            rec.extra.pop(leases.NA, None)
            rec.extra.update({k: v for k, v in settled.extra.items() if k == leases.NA})

    async def run(self) -> TrialRecord:
        rec = self.rec
        rec.status = TrialStatus.RUNNING
        rec.started_at = utcnow()
        self._save()
        timings = PhaseTimings()
        rec.extra["network"] = network_label(self.task)
        rec.extra["network_source"] = network_source(self.task)
        if (verifier_net := verifier_network_label(self.task)) is not None:
            rec.extra["verifier_network"] = verifier_net
        if self.task.mcp_servers:  # Harbor's environment.mcp_servers, as the task offers them
            rec.extra["mcp_servers"] = [m.model_dump(mode="json", exclude_defaults=True)
                                        for m in self.task.mcp_servers]
        sandbox: Sandbox | None = None
        service: asyncio.Task[ExecResult] | None = None  # the image's ENTRYPOINT
        meter: TrialMeter | None = None
        token_open = False
        side = sidecars.Sidecars()
        switch = phase_networks(self.task)  # the verifier's network differs from the agent's
        try:
            t0 = time.monotonic()
            try:
                sandbox = await self.ctx.backend.start(sandbox_spec(self.task, self.agent, self.ctx.gateway))
                if switch is not None:  # the agent phase's network before anything runs
                    await set_network(sandbox, *switch[0])
                if self.task.agent_user is None:  # agentmeter's account: the workdir is its
                    if (why := agent_workdir_problem(sandbox.workdir)) is not None:
                        raise SandboxError(why)
                    await sandbox.exec(["chown", "-R", f"{AGENT_UID}:{AGENT_GID}", sandbox.workdir],
                                       user="root")
                # Harbor's artifacts directory: writable by every user, collected after the agent
                await sandbox.exec(["install", "-d", "-m", "0777", hooks.ARTIFACTS_DIR], user="root")
                if staged_early(self.task):
                    # before the agent runs: hidden from it, and a disk it fills cannot stop it
                    await make_verifier(self.task.verifier_kind).stage(self.task, sandbox)
                service = hooks.start_entrypoint(sandbox, self.task)
                if self.task.sidecars:  # compose services (runner/sidecars.py)
                    side = await sidecars.start_sidecars(self.ctx.backend, self.task, sandbox)
                if self.task.healthcheck is not None:
                    await hooks.healthcheck(sandbox, self.task.healthcheck)
            except SandboxError as e:
                raise InfraError(f"environment: {e}") from e
            timings.environment = time.monotonic() - t0

            t0 = time.monotonic()
            endpoint = None
            if self.agent.uses_model:
                endpoint = self._open_gateway_trial()
                token_open = True
            snapshot = await sandbox.snapshot()
            timings.agent_setup = time.monotonic() - t0

            t0 = time.monotonic()
            agent_run = await self._run_agent(sandbox, endpoint)
            timings.agent_run = time.monotonic() - t0
            timings.agent_command = agent_run.command_s
            if token_open and self.ctx.gateway is not None:
                meter = await self.ctx.gateway.finish_trial(rec.id)  # calls under way metered
                token_open = False

            t0 = time.monotonic()
            try:  # what the agent detached (setsid, nohup, daemons) must not meet the verifier
                await sandbox.kill_user_processes(AGENT_USER)
            except SandboxError as e:
                raise InfraError(f"ending the agent's processes: {e}") from e
            self._note_blocked("the agent", sandbox)
            if switch is not None:  # the shared verifier's own network from here on
                try:
                    await set_network(sandbox, *switch[1])
                except SandboxError as e:
                    raise InfraError(f"switching to the verifier's network: {e}") from e
            await self._save_diff(sandbox, snapshot)  # of a tree nothing of the agent changes
            # Harbor's order: collect hooks, then artifacts, then the verifier
            hook_problems = await hooks.collect(sandbox, self.task.collect, side.boxes)
            if hook_problems:
                rec.extra["collect_problems"] = hook_problems
            await self._collect_artifacts(sandbox, side)
            if self.task.separate_verifier is not None:  # a fresh sandbox: runner/separate.py
                await side.stop()
                await hooks.stop_entrypoint(service)
                agent_box, sandbox = sandbox, None
                await agent_box.stop()
                sandbox = await self._verifier_sandbox()
                verdict = await self._verify(sandbox, meter.next_seq if meter is not None else 0)
            else:
                verdict = await self._verify_shared(sandbox,
                                                    meter.next_seq if meter is not None else 0)
            timings.verification = time.monotonic() - t0
            timings.verifier_command = verdict.command_s
            self._finish(agent_run, meter, verdict)
        except InfraError as e:
            rec.status = TrialStatus.INFRA_INVALID
            rec.error = str(e)[-4000:]
        except asyncio.CancelledError:  # Ctrl-C / SIGTERM: record the try as interrupted
            rec.status = TrialStatus.INFRA_INVALID
            rec.error = INTERRUPTED
            rec.finished_at = utcnow()
            if meter is None and token_open and self.ctx.gateway is not None:
                meter = self.ctx.gateway.close_trial(rec.id)
                token_open = False
            if meter is not None:
                self._apply_meter(meter)
            rec.timings = timings
            self._save()  # first: a second cancellation must not leave the try 'running'
            await hooks.finish_despite_cancellation(hooks.stop_entrypoint(service))
            await hooks.finish_despite_cancellation(side.stop())
            if sandbox is not None:
                box, sandbox = sandbox, None
                await hooks.finish_despite_cancellation(box.stop())
            raise
        except Exception as e:  # a harness bug must not take the run down
            rec.status = TrialStatus.INFRA_INVALID
            rec.error = f"harness error: {e!r}\n{traceback.format_exc()[-3000:]}"
        finally:
            if token_open and self.ctx.gateway is not None:
                meter = self.ctx.gateway.close_trial(rec.id)
            await hooks.stop_entrypoint(service)
            await side.stop()
            if sandbox is not None:
                try:
                    await sandbox.stop()
                except Exception as e:  # the try is decided; one sandbox that would not stop
                    rec.extra["sandbox_stop_error"] = repr(e)[-1000:]  # must not end the run
        if meter is not None:
            self._apply_meter(meter)
        rec.timings = timings
        rec.finished_at = utcnow()
        rec.owner_pid = None
        self._save()
        return rec

    def _open_gateway_trial(self, first_seq: int = 0) -> GatewayEndpoint:
        gw = self.ctx.gateway
        if gw is None:
            raise InfraError(f"agent {self.agent.name} needs a model but no gateway is running")
        b = self.task.budgets
        solution = replay_script(self.task)
        token = gw.open_trial(self.rec.id, self.config.model.name,
                              budget=Budget(max_tokens=b.max_tokens, max_usd=b.max_usd,
                                            max_calls=b.max_calls),
                              scripted=ScriptedContext(solution_script=solution),
                              sink=self._call_sink(), first_seq=first_seq,
                              hosted_tools=self.task.allow_internet)
        return GatewayEndpoint(base_url=f"http://127.0.0.1:{GATEWAY_PORT}", token=token,
                               model=self.config.model.name,
                               host_base_url=gw.base_url if gw.port else None)

    async def _run_agent(self, sandbox: Sandbox, endpoint: GatewayEndpoint | None, *,
                         prompt: str | None = None, session: AgentSession | None = None,
                         prefix: str = "") -> AgentRun:
        """Run the agent once; ``prefix`` (a scenario round's ``rounds/<r>/``) keeps its logs
        apart from other runs of the same trial."""
        agent_dir = self.dir / prefix / "agent"
        agent_dir.mkdir(parents=True, exist_ok=True)
        ctx = AgentContext(task=self.task, sandbox=sandbox, timeout_s=self.task.agent_timeout_s,
                           logs_dir=agent_dir, gateway=endpoint, prompt=prompt, session=session)
        try:
            run = await self._with_budget_watch(ctx, endpoint is not None)
        except SandboxError as e:
            raise InfraError(f"agent run: {e}") from e
        except Exception as e:
            run = AgentRun(error=f"agent {self.agent.name} crashed: {e!r}")
        for name, (path, kind) in run.artifacts.items():
            if path.is_file():
                self._artifact(prefix + name, path, kind)
        if run.notes:
            self.rec.extra["agent_notes"] = list(run.notes)
        return run

    async def _with_budget_watch(self, ctx: AgentContext, metered: bool) -> AgentRun:
        """Stop the agent once the gateway refused a call for budget (some CLIs back off and
        retry a refusal until their own timeout): ``ctx.stop`` asks it to end its processes
        and return what it collected; one that does not within ``STOP_GRACE_S`` is cancelled
        (and its logs are lost)."""
        gw = self.ctx.gateway
        if not metered or gw is None:
            return await self.agent.run(ctx)
        task = asyncio.ensure_future(self.agent.run(ctx))
        while not task.done():
            await asyncio.wait({task}, timeout=BUDGET_POLL_S)
            if not task.done() and gw.trial_meter(self.rec.id).budget_exceeded:
                ctx.stop.set()
                await asyncio.wait({task}, timeout=STOP_GRACE_S)
                if not task.done():
                    task.cancel()  # the sandbox kills the agent's whole process tree
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return AgentRun(error="budget_exceeded")
                return dataclasses.replace(task.result(), error="budget_exceeded")
        return task.result()

    def _finish(self, run: AgentRun, meter: TrialMeter | None, verdict: Verdict) -> None:
        rec = self.rec
        rec.reward = verdict.reward
        rec.rewards = dict(verdict.rewards)
        rec.passed = verdict.passed
        rec.extra.update(verdict.extra)
        rec.extra["pass_threshold"] = verdict.pass_threshold
        rec.tool_calls = dict(run.tool_calls)
        rec.turns = run.turns
        # trajectory analytics: the inputs of effort calibration and tool-use analysis
        reads = run.files_read
        rec.extra["trajectory"] = {"tool_calls_total": sum(run.tool_calls.values()),
                                   "files_read": len(reads), "distinct_files_read": len(set(reads)),
                                   "repeated_reads": len(reads) - len(set(reads))}
        if run.self_reported_usage is not None:
            rec.extra["self_reported_usage"] = run.self_reported_usage.model_dump()
        if meter is not None and meter.infra_error:
            rec.status = TrialStatus.INFRA_INVALID
            rec.error = f"provider: {meter.infra_error}"
        elif rec.passed:
            rec.status = TrialStatus.PASSED
        elif meter is not None and meter.budget_exceeded or run.error == "budget_exceeded":
            rec.status = TrialStatus.BUDGET_EXCEEDED
        elif run.timed_out:
            rec.status = TrialStatus.TIMEOUT
            rec.error = f"agent timed out after {self.task.agent_timeout_s:.0f}s"
        elif run.error:
            rec.status = TrialStatus.AGENT_ERROR
            rec.error = run.error
        else:
            rec.status = TrialStatus.FAILED
            if self.agent.name == "oracle" and run.exit_code and run.final_message:
                rec.error = run.final_message  # the reference solution crashed: say how
        if verdict.problem and not rec.error:
            rec.error = verdict.problem
        if self.blocked:
            rec.extra["unreachable"] = self.blocked
        if rec.status in (TrialStatus.FAILED, TrialStatus.AGENT_ERROR):
            rec.error = (unreachable_failure(self.task, self.blocked, rec.error)
                         or network_failure(self.task, rec.error, run.error, verdict) or rec.error)

    def _call_sink(self) -> StoreSink:
        """The gateway's sink: each call stored as it completes (by the gateway's writer
        thread, committed with other trials' calls that completed with it), so a SIGKILLed
        runner loses no served call."""
        return StoreSink(self.ctx.store, self.ctx.run_id, self.rec.try_number,
                         after=self._call_stored)

    def _call_stored(self, call: ModelCallRecord) -> None:
        if call.seq in self._late:  # the try ended before this call: its totals again
            self.ctx.store.settle_books(self.ctx.run_id, self.rec.id, self.rec.try_number)

    def _apply_meter(self, meter: TrialMeter) -> None:
        rec = self.rec
        if meter.refused:  # beyond calls.MAX_RECORDED_REFUSALS they are counted, not recorded
            rec.extra["requests_refused"] = meter.refused
        if not meter.calls and not meter.calls_in_flight:  # no call started: zero is known
            rec.usage = TokenUsage(input=0, output=0, cache_creation=0, cache_read=0, reasoning=0)
            rec.cost_usd = 0.0
            return
        rec.usage = meter.usage
        rec.cost_usd = meter.cost_usd
        rec.model_calls = len(meter.calls)
        if meter.calls_in_flight:  # started, not ended: n/a until they are stored (_save)
            self._late = self._late | frozenset(meter.calls_in_flight)
            rec.extra[leases.IN_FLIGHT] = sorted(self._late)
            rec.usage, rec.cost_usd = TokenUsage(), None
            rec.model_calls += len(meter.calls_in_flight)
        if meter.calls_without_usage:
            rec.extra["calls_without_usage"] = meter.calls_without_usage
        stored = set(meter.stored_seqs)  # the rest: the sink failed (e.g. the store was locked)
        unstored = [c for c in meter.calls if c.seq not in stored]
        if unstored:
            self.ctx.store.add_model_calls(self.ctx.run_id, unstored, try_number=rec.try_number)

"""One scenario run: its steps in order, in one sandbox, each step in rounds with feedback.

A scenario (``tasks/scenario.py``: Harbor's multi-step task, AgencyBench's scenario) runs for one
configuration and one outer attempt as a unit:

1. one sandbox from the scenario's environment, alive across all its steps and their rounds (the
   workspace carries over: AgencyBench §1.3, "the completion results of preceding tasks influence
   subsequent ones"); one :class:`AgentSession`, so an agent that can continue its conversation
   does so from step to step and round to round;
2. per step: its ``workdir/`` files merged in (and its ``setup.sh`` run as root), its verifier
   staged where the agent cannot see it; then up to ``max_attempts`` rounds: the agent runs
   (through the gateway, metered), its leftover processes are killed, the verifier decides; a
   failed round gets feedback (``runner/feedback.py``) and the next round starts;
3. after a step that failed all its rounds (``halt_on_fail``) or ended below its ``min_reward``,
   the remaining steps are recorded as skipped (failed, reward 0, ``extra["skipped"]``).

Each step is one trial in the store (``extra``: scenario, position, rounds, round scores,
feedback; artifacts under ``rounds/<r>/``), its usage the sum over its rounds. A run that ends
early for a reason not the configuration's (sandbox, harness, interruption) leaves no half
scenario counted: the executor restarts the scenario from its first step (``executor.py``).
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from agentmeter.agents.base import Agent, AgentRun, AgentSession
from agentmeter.gateway import TrialMeter
from agentmeter.records import ConfigRecord, PhaseTimings, TokenUsage, TrialRecord, TrialStatus, utcnow
from agentmeter.runner import feedback as fb
from agentmeter.runner import hooks
from agentmeter.runner.judging import merge_meters
from agentmeter.runner.tasksandbox import sandbox_spec, staged_early
from agentmeter.runner.trial import INTERRUPTED, TrialContext, TrialRunner
from agentmeter.runner.verification import InfraError
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import (
    AGENT_GID,
    AGENT_UID,
    AGENT_USER,
    HARNESS_ENV,
    ExecResult,
    SandboxError,
    agent_workdir_problem,
    harness_bash,
)
from agentmeter.tasks.models import Task
from agentmeter.verify.command import TESTS_MOUNT
from agentmeter.verify.protocol import Verdict, VerificationError
from agentmeter.verify.registry import make_verifier

#: why the steps after a halt have no run of their own
SKIPPED = "skipped: the scenario halted at step {position} ({task}: {why})"


class StepRunner(TrialRunner):
    """One step of a scenario in the scenario's sandbox: rounds until it passes or K are used."""

    async def run_in(self, sandbox: Sandbox, session: AgentSession, max_rounds: int,
                     feedback_mode: str) -> TrialRecord:
        rec, task = self.rec, self.task
        rec.status, rec.started_at = TrialStatus.RUNNING, utcnow()
        self._save()
        timings = PhaseTimings(agent_run=0.0, verification=0.0)
        meters: list[TrialMeter] = []
        runs: list[AgentRun] = []
        verdict: Verdict | None = None
        scores: list[float | None] = []
        texts: list[str] = []
        try:
            t0 = time.monotonic()
            await self._prepare(sandbox)
            timings.environment = time.monotonic() - t0
            prompt: str | None = None
            for r in range(1, max_rounds + 1):
                prefix = f"rounds/{r}/"
                rec.extra.update(rounds=r)
                snapshot = await sandbox.snapshot()
                t0 = time.monotonic()
                endpoint = self._open_gateway_trial(self.next_seq) if self.agent.uses_model else None
                try:
                    runs.append(await self._run_agent(sandbox, endpoint, prompt=prompt,
                                                      session=session, prefix=prefix))
                finally:
                    if endpoint is not None and self.ctx.gateway is not None:
                        meter = await self.ctx.gateway.finish_trial(rec.id)
                        meters.append(meter)
                        self.next_seq = max(self.next_seq, meter.next_seq)
                assert timings.agent_run is not None
                timings.agent_run += time.monotonic() - t0
                t0 = time.monotonic()
                try:
                    await sandbox.kill_user_processes(AGENT_USER)
                except SandboxError as e:
                    raise InfraError(f"ending the agent's processes: {e}") from e
                self._note_blocked("the agent", sandbox)
                await self._save_diff(sandbox, snapshot, prefix)  # the agent's processes gone
                verdict = await self._verify_step(sandbox, prefix)
                assert timings.verification is not None
                timings.verification += time.monotonic() - t0
                timings.agent_command = (timings.agent_command or 0.0) + runs[-1].command_s
                if verdict.command_s is not None:
                    timings.verifier_command = (timings.verifier_command or 0.0) + verdict.command_s
                scores.append(None if verdict.reward is None else round(10 * verdict.reward, 4))
                rec.extra.update(round_scores=scores,
                                 round_rewards=[None if s is None else s / 10 for s in scores])
                self._save()  # a round's result is visible (viewer) before the step ends
                stop = verdict.passed or r == max_rounds or (meters and (
                    meters[-1].budget_exceeded or meters[-1].infra_error)) or runs[-1].timed_out
                if stop:
                    break
                await self._restage(sandbox)
                text = await self._feedback(verdict, feedback_mode, f"rounds/{r + 1}/",
                                            sandbox)
                texts.append(text)
                rec.extra["feedback"] = texts
                prompt = fb.next_prompt(task, text, continued=session.resumes)
            assert verdict is not None
            await self._collect_artifacts(sandbox)
            self._finish(_combined(runs), merge_meters(meters) if meters else None, verdict)
        except InfraError as e:
            rec.status, rec.error = TrialStatus.INFRA_INVALID, str(e)[-4000:]
        except (SandboxError, VerificationError) as e:
            rec.status, rec.error = TrialStatus.INFRA_INVALID, f"scenario step: {e}"[-4000:]
        except asyncio.CancelledError:
            rec.status, rec.error = TrialStatus.INFRA_INVALID, INTERRUPTED
            self._close(meters, timings)
            raise
        except Exception as e:  # a harness bug must not take the run down
            rec.status, rec.error = TrialStatus.INFRA_INVALID, f"harness error: {e!r}"
        rec.extra["session_continuity"] = session.continued
        self._close(meters, timings)
        return rec

    async def _verify_step(self, sandbox: Sandbox, prefix: str) -> Verdict:
        """The step's verdict: in the scenario's sandbox, or (a separate verifier, Harbor's
        ``environment_mode = "separate"`` at the step or the task) in a fresh sandbox of its own
        holding only what was collected, Harbor's order: the artifacts first."""
        if self.task.separate_verifier is None:
            return await self._verify_shared(sandbox, self.next_seq, prefix)
        await self._collect_artifacts(sandbox)
        box = await self._verifier_sandbox()
        try:
            return await self._verify(box, self.next_seq, prefix)
        finally:
            await hooks.finish_despite_cancellation(box.stop())

    def _close(self, meters: list[TrialMeter], timings: PhaseTimings) -> None:
        rec = self.rec
        if meters:
            self._apply_meter(merge_meters(meters))
        rec.timings = timings
        rec.finished_at = utcnow()
        rec.owner_pid = None
        self._save()

    async def _prepare(self, sandbox: Sandbox) -> None:
        """The step's files merged into the working directory (its setup.sh run as root, by
        path, then removed), and its verifier staged where the agent cannot see it."""
        task = self.task
        try:
            if task.step_workdir is not None:
                workdir = task.workdir or sandbox.workdir
                await sandbox.copy_in(task.step_workdir, workdir, user=AGENT_USER)
                setup = task.step_workdir / "setup.sh"
                if setup.is_file():
                    # by path, as Harbor runs it: "$0" is the script (it may ``rm -- "$0"``);
                    # the copy just uploaded, before any process of this step's agent exists;
                    # bash and rm of the harness's (an earlier step's agent may have put its
                    # own first on the image's PATH)
                    script = shlex.quote(f"{workdir.rstrip('/')}/setup.sh")
                    r = await sandbox.exec(harness_bash(f"bash {script}"), user="root",
                                           cwd=workdir, timeout=task.verifier_timeout_s)
                    await sandbox.exec(["rm", "-f", f"{workdir}/setup.sh"], user="root",
                                       env=HARNESS_ENV)
                    if r.exit_code != 0:
                        raise InfraError(f"step setup {setup}: exit {r.exit_code}: "
                                         f"{r.stderr.strip()[-500:]}")
            await self._restage(sandbox)  # the previous step's /tests go first
        except SandboxError as e:
            raise InfraError(f"preparing step {task.id}: {e}") from e

    async def _restage(self, sandbox: Sandbox) -> None:
        """Before another round: the verification's files out of sight again, staged anew."""
        r = await sandbox.exec(["rm", "-rf", "--", TESTS_MOUNT], user="root", cwd="/",
                               env=HARNESS_ENV)
        if r.exit_code != 0:
            raise InfraError(f"clearing {TESTS_MOUNT}: {r.stderr.strip()[-300:]}")
        if staged_early(self.task):  # else uploaded at verification (runner/verification.py)
            await make_verifier(self.task.verifier_kind).stage(self.task, sandbox)

    async def _feedback(self, verdict: Verdict, mode: str, prefix: str,
                        sandbox: Sandbox) -> str:
        if mode == "user_sim":
            from agentmeter.verify.rubric.verifier import copy_deliverables, seeds_of

            judge = self._judge(self.next_seq)
            if judge is None:
                raise InfraError("feedback = 'user_sim' needs a judge model (--judge-model)")
            settle = False
            copy = Path(tempfile.mkdtemp(prefix=".deliverables-", dir=self.dir))
            try:  # the user simulation sees the deliverables, as the text judge does
                files = await copy_deliverables(sandbox, self.task.workdir or sandbox.workdir,
                                                copy / "workdir", seeds_of(self.task))
                text = await fb.user_sim(verdict, self.task, judge, files)
                settle = True
            finally:
                shutil.rmtree(copy, ignore_errors=True)
                await self._close_judge(judge, settle)
        else:
            text = fb.template(verdict)
        path = self.dir / prefix / "feedback.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self._artifact(prefix + "feedback.md", path, "other")
        return text


def _combined(runs: list[AgentRun]) -> AgentRun:
    """A step's rounds as one agent run: counts added up, the last round's ending."""
    last = runs[-1]
    tools: Counter[str] = Counter()
    usage: TokenUsage | None = None
    for run in runs:
        tools.update(run.tool_calls)
        if run.self_reported_usage is not None:
            usage = run.self_reported_usage if usage is None else usage + run.self_reported_usage
    turns = [r.turns for r in runs if r.turns is not None]
    return AgentRun(exit_code=last.exit_code, timed_out=last.timed_out, error=last.error,
                    command_s=sum(r.command_s for r in runs), tool_calls=dict(tools),
                    files_read=[p for r in runs for p in r.files_read],
                    turns=sum(turns) if turns else None, self_reported_usage=usage,
                    final_message=last.final_message, notes=[n for r in runs for n in r.notes])


def _halt_reason(task: Task, rec: TrialRecord, halt_on_fail: bool) -> str | None:
    if rec.status is TrialStatus.INFRA_INVALID:
        return None
    if halt_on_fail and not rec.passed:
        return "it failed all its rounds"
    for key, floor in (task.min_reward or {}).items():
        value = rec.reward if key == "reward" else rec.rewards.get(key)
        if value is None or value < floor:
            return f"{key} {value} is below its min_reward {floor}"
    return None


class ScenarioRunner:
    """Runs one scenario for one configuration and outer attempt; stores every step."""

    def __init__(self, ctx: TrialContext, config: ConfigRecord, agent: Agent,
                 steps: list[tuple[Task, TrialRecord]]) -> None:
        self.ctx, self.config, self.agent, self.steps = ctx, config, agent, steps

    async def run(self) -> list[TrialRecord]:
        """The steps' records, all final. A step that ended infra_invalid stops the scenario:
        the steps after it are recorded infra_invalid too (nothing of a half run counts)."""
        first, _ = self.steps[0]
        scenario = first.scenario
        assert scenario is not None
        done: list[TrialRecord] = []
        sandbox: Sandbox | None = None
        service: asyncio.Task[ExecResult] | None = None  # the image's ENTRYPOINT
        try:
            try:
                sandbox = await self.ctx.backend.start(sandbox_spec(first, self.agent,
                                                                    self.ctx.gateway))
                service = hooks.start_entrypoint(sandbox, first)
                if first.agent_user is None:  # agentmeter's account: the workdir is its
                    if (why := agent_workdir_problem(sandbox.workdir)) is not None:
                        raise SandboxError(why)
                    await sandbox.exec(["chown", "-R", f"{AGENT_UID}:{AGENT_GID}",
                                        sandbox.workdir], user="root")
                await sandbox.exec(["install", "-d", "-m", "0777", hooks.ARTIFACTS_DIR], user="root")
                if first.healthcheck is not None:
                    await hooks.healthcheck(sandbox, first.healthcheck)
            except SandboxError as e:
                return self._abandon(0, f"environment: {e}")
            session = AgentSession()
            halted: str | None = None
            for i, (task, rec) in enumerate(self.steps):
                if halted is not None:
                    done.append(self._skip(rec, halted))
                    continue
                runner = StepRunner(self.ctx, self.config, self.agent, task, rec)
                runner_rec = await runner.run_in(sandbox, session, scenario.max_attempts,
                                                 scenario.feedback)
                done.append(runner_rec)
                if runner_rec.status is TrialStatus.INFRA_INVALID:
                    return done + self._abandon(i + 1, f"step {task.id} ended infra_invalid: "
                                                f"{runner_rec.error}")
                why = _halt_reason(task, runner_rec, scenario.halt_on_fail)
                if why is not None:
                    halted = SKIPPED.format(position=i + 1, task=task.id, why=why)
            return done
        finally:
            await hooks.finish_despite_cancellation(hooks.stop_entrypoint(service))
            if sandbox is not None:
                await hooks.finish_despite_cancellation(sandbox.stop())

    def _skip(self, rec: TrialRecord, why: str) -> TrialRecord:
        now = utcnow()
        rec.status, rec.error = TrialStatus.FAILED, why
        rec.reward, rec.passed, rec.rewards = 0.0, False, {}
        rec.started_at = rec.finished_at = now
        rec.owner_pid = None
        rec.extra.update(skipped=True, rounds=0, round_scores=[])
        if self.agent.uses_model:
            rec.usage = TokenUsage(input=0, output=0, cache_creation=0, cache_read=0, reasoning=0)
            rec.cost_usd = 0.0
        self.ctx.store.save_trial(rec)
        return rec

    def _abandon(self, start: int, why: str) -> list[TrialRecord]:
        """The steps from ``start`` on, recorded infra_invalid without running."""
        out = []
        for _task, rec in self.steps[start:]:
            rec.status, rec.error = TrialStatus.INFRA_INVALID, f"not run: {why}"[-4000:]
            rec.started_at = rec.finished_at = utcnow()
            rec.owner_pid = None
            self.ctx.store.save_trial(rec)
            out.append(rec)
        return out

"""A trial's verification: the verifier staged and run in the agent's sandbox or in a separate
one (Harbor's verifier environment), a judge's model calls metered as the trial's evaluation
cost, and the hosts each phase's proxy refused attributed to that phase. A part of
``TrialRunner`` (trial.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from agentmeter.agents.base import Agent
from agentmeter.gateway import TrialMeter
from agentmeter.gateway.metering import StoreSink
from agentmeter.runner import separate
from agentmeter.runner.artifacts import TrialArtifacts
from agentmeter.runner.judging import GatewayJudge, evaluation_extra, merge_meters
from agentmeter.runner.network import blocked_hosts
from agentmeter.runner.tasksandbox import (
    agent_is_root,
    base_image,
    sandbox_spec,
    staged_early,
    task_environment,
)
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError
from agentmeter.verify.protocol import Verdict, VerificationError, VerifierContext
from agentmeter.verify.registry import make_verifier


class InfraError(Exception):
    """A failure not attributable to the configuration."""


class TrialVerification(TrialArtifacts, ABC):
    """The verification steps of ``TrialRunner``."""

    agent: Agent
    next_seq: int
    judge_meters: list[TrialMeter]
    blocked: dict[str, dict[str, str]]

    @abstractmethod
    def _call_sink(self) -> StoreSink:
        """Where the trial's model calls are stored (``TrialRunner``'s)."""

    def _judge(self, first_seq: int) -> GatewayJudge | None:
        model = self.ctx.judge_model
        if model is None:
            return None
        if self.ctx.gateway is None:
            raise InfraError(f"judge model {model} is set but no gateway is running")
        return GatewayJudge(self.ctx.gateway, model, self.rec.id, self._call_sink(), first_seq)

    async def _verifier_sandbox(self) -> Sandbox:
        """The separate verifier's sandbox, the collected artifacts restored and /tests staged."""
        agent_spec = sandbox_spec(self.task, self.agent, None)
        image = base_image(self.task)
        spec = separate.verifier_spec(self.task, [] if image else task_environment(self.task),
                                      image, agent_spec)
        try:
            box = await separate.start_verifier_sandbox(self.ctx.backend, spec, self.task,
                                                        self.dir / "artifacts")
        except SandboxError as e:
            raise InfraError(f"verifier environment: {e}") from e
        try:
            await make_verifier(self.task.verifier_kind).stage(self.task, box)
        except SandboxError as e:
            await box.stop()
            raise InfraError(f"verifier environment: {e}") from e
        return box

    async def _verify_shared(self, sandbox: Sandbox, first_seq: int, prefix: str = "") -> Verdict:
        """``_verify`` in the agent's own sandbox. The verifier files of a task whose agent runs
        as Harbor's user (maybe root) are uploaded now, the agent's processes gone (Harbor's
        order). A sandbox a root agent left unable to take them or to run the verifier is the
        agent's failure (a verdict without reward naming why), never ``infra_invalid``."""
        try:
            if not staged_early(self.task):
                try:
                    await make_verifier(self.task.verifier_kind).stage(self.task, sandbox)
                except SandboxError as e:
                    raise InfraError(f"verification: {e}") from e
            return await self._verify(sandbox, first_seq, prefix)
        except InfraError as e:
            if not (isinstance(e.__cause__, SandboxError) and agent_is_root(sandbox)):
                raise
            return Verdict(reward=None, pass_threshold=self.task.pass_threshold,
                           problem=f"the verifier could not run in the sandbox the agent left "
                                   f"(the agent ran as root there): {e}"[-2000:])

    async def _verify(self, sandbox: Sandbox, first_seq: int, prefix: str = "") -> Verdict:
        """The verdict; a judge's calls (numbered from ``first_seq``, after the agent's) are
        recorded as the trial's evaluation cost, also when verification fails. ``prefix`` (a
        scenario round's ``rounds/<r>/``) names the verifier's artifacts of this run."""
        judge = self._judge(first_seq)
        self.next_seq = max(self.next_seq, first_seq)
        artifact_dir = self.dir / prefix
        artifact_dir.mkdir(parents=True, exist_ok=True)

        def register(name: str, path: Path, kind: str) -> None:
            self._artifact(prefix + name, path, kind)

        ctx = VerifierContext(artifact_dir=artifact_dir, register=register,
                              timeout_s=self.task.verifier_timeout_s, judge=judge)
        settle = False
        try:
            verdict = await make_verifier(self.task.verifier_kind).verify(self.task, sandbox, ctx)
            settle = True
            return verdict
        except (SandboxError, VerificationError) as e:
            raise InfraError(f"verification: {e}") from e
        finally:
            self._note_blocked("the tests", sandbox)
            if judge is not None:
                await self._close_judge(judge, settle)

    def _note_blocked(self, who: str, sandbox: Sandbox) -> None:
        """Attribute to ``who`` the hosts ``sandbox``'s proxy refused or could not reach that no
        earlier phase met (a shared sandbox's proxy holds the agent's too)."""
        seen = {h for hosts in self.blocked.values() for h in hosts}
        new = {h: why for h, why in blocked_hosts(sandbox).items() if h not in seen}
        if new:
            self.blocked[who] = {**self.blocked.get(who, {}), **new}

    async def _close_judge(self, judge: GatewayJudge, settle: bool) -> None:
        """Close a judge's gateway trial; what it cost joins the trial's evaluation cost."""
        meter = await judge.close(settle=settle)
        if meter is not None:
            self.judge_meters.append(meter)
            self.next_seq = max(self.next_seq, meter.next_seq)
            self.rec.extra["evaluation"] = evaluation_extra(merge_meters(self.judge_meters))

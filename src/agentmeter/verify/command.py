"""Running a task's test command in the sandbox: the step the built-in verifier kinds share.

Harbor's contract: the task's verifier files are placed under ``/tests``, ``/logs/verifier`` is
emptied, and the test command runs (as root, or as the task's ``[verifier] user``) with
``TEST_DIR=/tests`` and the task's verifier environment. Its output is kept as the trial's
``verifier.log`` artifact. The kinds differ only in what they read afterwards (reward files,
pytest's summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import ExecResult
from agentmeter.verify.protocol import Verdict, VerifierArtifact, VerifierContext

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

#: where the task's verifier files are placed inside the sandbox
TESTS_MOUNT = "/tests"
#: where a test script writes its reward and logs inside the sandbox
VERIFIER_LOGS_DIR = "/logs/verifier"


class CommandRun(NamedTuple):
    """The finished test command and its stored log."""

    result: ExecResult
    log: VerifierArtifact


class Score(NamedTuple):
    """What a kind read from a test run: reward, named rewards, and why the reward is missing."""

    reward: float | None
    rewards: dict[str, float]
    problem: str | None


async def run_test_command(task: Task, sandbox: Sandbox, ctx: VerifierContext, *,
                           env: Mapping[str, str] | None = None,
                           prepare: str | None = None) -> CommandRun:
    """Place the task's verifier files, run its test command as the task's verifier user (root
    unless ``[verifier] user`` says ``agent``) and store its output.

    ``env`` is the kind's own environment (the task's verifier environment overrides it);
    ``prepare`` is a kind's extra shell step, run as root after ``/logs/verifier`` is emptied.
    """
    for rel, host in task.verifier_files().items():
        await sandbox.write_file(f"{TESTS_MOUNT}/{rel}", host.read_bytes(),
                                 mode=0o755 if host.stat().st_mode & 0o111 else 0o644)
    steps = f"rm -rf {VERIFIER_LOGS_DIR} && mkdir -p {VERIFIER_LOGS_DIR}"
    if prepare:
        steps += f" && {prepare}"
    if task.verifier_user != "root":  # the task's [verifier] user must be able to write its reward
        steps += f" && chown -R {task.verifier_user}:{task.verifier_user} {VERIFIER_LOGS_DIR}"
    await sandbox.exec(["sh", "-c", steps], user="root")
    r = await sandbox.exec(task.test_command, user=task.verifier_user, timeout=ctx.timeout_s,
                           env={**(env or {}), **task.verifier_env, "TEST_DIR": TESTS_MOUNT})
    out = ctx.artifact_dir / "verifier.log"
    out.write_text(f"$ {task.test_command}\n--- exit {r.exit_code}"
                   f"{' (timed out)' if r.timed_out else ''}\n--- stdout\n{r.stdout}\n"
                   f"--- stderr\n{r.stderr}\n")
    return CommandRun(result=r, log=ctx.add_artifact("verifier.log", out, "verifier_output"))


def verdict_of(task: Task, ctx: VerifierContext, run: CommandRun, score: Score) -> Verdict:
    """The verdict of a test run: a timed-out command without a reward says so."""
    problem = score.problem
    if run.result.timed_out and score.reward is None:
        problem = f"the verifier timed out after {ctx.timeout_s:.0f}s"
    return Verdict(reward=score.reward, rewards=score.rewards, pass_threshold=task.pass_threshold,
                   problem=problem, artifacts=(run.log,), command_s=run.result.duration_s)

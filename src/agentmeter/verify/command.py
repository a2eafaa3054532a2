"""Running a task's test command in the sandbox: the step the built-in verifier kinds share.

Harbor's contract, hardened so agent code cannot decide its own reward (docs/verifiers.md):

- **Staged before the agent runs** (``stage_verifier``): the task's verifier files and the
  ``as-agent`` tool go into ``STAGE_DIR``, a root-only (0700) directory the agent cannot list or
  read, and ``/logs/verifier`` is made root's. Nothing is written at verification time, so an
  agent that fills its disk makes its own task fail, never the trial ``infra_invalid``. A task
  whose agent runs as Harbor's user (maybe root: ``Task.agent_user``) is staged instead after
  the agent's processes are gone, Harbor's order (runner/verification.py ``_verify_shared``).
- **At verification** the staged tests are renamed to ``/tests`` (no space needed),
  ``/logs/verifier`` is emptied and root's again, and the test command runs as root (or the
  task's ``[verifier] user``) with ``TEST_DIR=/tests`` and ``AS_AGENT``: the path of a tool that
  runs agent-written code as the agent's account (no capabilities, no new privileges) and
  then kills whatever that user left running. Agent code so run cannot write ``/logs/verifier``,
  read ``/tests`` or signal the test script. The account is the one the agent ran as
  (accounts.py: agentmeter's uid 1000, or the image's ``USER`` with its ids, groups and HOME);
  when that is root (a Harbor task whose image sets no USER), CMD runs as root, as the agent
  did and as Harbor's tests run agent code: such a task's verdict rests on Harbor's order
  (tests uploaded after the agent's processes are gone), not on as-agent.
- **A test command killed by a signal** (exit code above 128 or negative) has no trusted reward:
  the verdict is a fail with that problem, never a pass and never ``infra_invalid``.

The command's output is kept as the trial's ``verifier.log`` artifact. The kinds differ only in
what they read afterwards (reward files, pytest's summary).
"""

from __future__ import annotations

import io
import shlex
import tarfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from agentmeter.sandbox.accounts import SANDBOX_ACCOUNT, Account, account_of
from agentmeter.sandbox.output import strip_ansi
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import (
    HARNESS_ENV,
    HARNESS_PATH,
    ExecResult,
    SandboxError,
    harness_bash,
)
from agentmeter.verify.mounts import TESTS_MOUNT as TESTS_MOUNT
from agentmeter.verify.protocol import Verdict, VerifierArtifact, VerifierContext

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

#: where a test script writes its reward and logs inside the sandbox
VERIFIER_LOGS_DIR = "/logs/verifier"
#: root-only directory holding the staged tests and the as-agent tool from the sandbox's start
STAGE_DIR = "/.agentmeter-verifier"
#: the tool a test script runs agent-written code with (its path is in the test's $AS_AGENT)
AS_AGENT = f"{STAGE_DIR}/as-agent"

AS_AGENT_SCRIPT = r"""#!/bin/sh
# as-agent (agentmeter's verifier tool; docs/verifiers.md)
#   as-agent CMD [ARG...]   run CMD as the agent's account (uid @UID@): no capabilities,
#                           no new privileges; afterwards every process of that user still
#                           running here is killed, so agent code cannot outlive its call.
#                           Calls must not overlap. The exit status is CMD's. An agent that ran
#                           as root (the image's USER) gets CMD run as root, as it ran.
#   as-agent --own PATH...  give PATH (recursively, links not followed) to the agent's account,
#                           for scratch files the agent's program must write.
uid=@UID@; gid=@GID@; groups=@GROUPS@
caller_path=$PATH  # CMD is looked up on it, as the agent; this tool's own programs are root's
PATH=@PATH@
if [ "${1-}" = --own ]; then shift; exec chown -R -P -h "$uid:$gid" -- "$@"; fi
if [ $# -eq 0 ]; then echo "usage: as-agent CMD [ARG...] | as-agent --own PATH..." >&2; exit 2; fi
export HOME=@HOME@ USER=@USER@ LOGNAME=@USER@
if [ "$(id -u)" != 0 ]; then PATH=$caller_path; exec "$@"; fi  # [verifier] user = agent
if [ "$uid" = 0 ]; then PATH=$caller_path; exec "$@"; fi  # the agent's account is root: as it ran
mapped=no
while read -r inside _outside count; do
    if [ "$uid" -ge "$inside" ] && [ "$uid" -lt $((inside + count)) ]; then mapped=yes; fi
done < /proc/self/uid_map
if [ $mapped = no ]; then
    # a rootless local sandbox maps only root: the agent user exists in a nested namespace
    exec unshare --user --map-user="$uid" --map-group="$gid" -- \
        setpriv --no-new-privs --inh-caps=-all --bounding-set=-all -- env PATH="$caller_path" "$@"
fi
if [ -n "$groups" ]; then groups="--groups=$groups"; else groups=--clear-groups; fi
drop="setpriv --reuid=$uid --regid=$gid $groups --inh-caps=-all --bounding-set=-all --no-new-privs"
$drop -- env PATH="$caller_path" "$@"
rc=$?
$drop -- sh -c 'kill -KILL -1' 2>/dev/null
exit $rc
"""

_STAGE = f"""set -e
S={STAGE_DIR}
rm -rf "$S"
mkdir -m 0700 "$S"
tar -x --no-same-owner -C "$S"
chown -R 0:0 "$S"
chmod 0700 "$S" "$S/tests"
mkdir -p {VERIFIER_LOGS_DIR}
chown 0:0 /logs {VERIFIER_LOGS_DIR}
chmod go-w /logs {VERIFIER_LOGS_DIR}
"""

def harness_program(prog: str, *args: str) -> list[str]:
    """An argv running ``prog`` (as root, say) looked up on HARNESS_PATH, not on the image's PATH
    (which it still gets: an interpreter's own programs keep the image's)."""
    return ["/bin/sh", "-c", f'p=$PATH; PATH={HARNESS_PATH}; x=$(command -v "$0") || exit 127; '
            'PATH=$p; exec "$x" "$@"', prog, *args]


#: exit status of the verification's first step when the tests were never staged
_NOT_STAGED = 75
_UNSTAGE = f"""S={STAGE_DIR}
[ -d "$S/tests" ] || exit {_NOT_STAGED}
rm -rf {TESTS_MOUNT} && mv "$S/tests" {TESTS_MOUNT} || exit 1
rm -rf {VERIFIER_LOGS_DIR}
mkdir -p {VERIFIER_LOGS_DIR}
chown 0:0 /logs {VERIFIER_LOGS_DIR}
chmod go-w /logs {VERIFIER_LOGS_DIR}
"""


class CommandRun(NamedTuple):
    """The finished test command and its stored log."""

    result: ExecResult
    log: VerifierArtifact


class Score(NamedTuple):
    """What a kind read from a test run: reward, named rewards, and why the reward is missing."""

    reward: float | None
    rewards: dict[str, float]
    problem: str | None


def as_agent_script(account: Account) -> str:
    """The as-agent tool for the agent's ``account`` (its ids, groups, name and HOME)."""
    return (AS_AGENT_SCRIPT.replace("@UID@", str(account.uid))
            .replace("@GID@", str(account.gid))
            .replace("@GROUPS@", shlex.quote(",".join(map(str, account.groups))))
            .replace("@USER@", shlex.quote(account.name))
            .replace("@HOME@", shlex.quote(account.home))
            .replace("@PATH@", HARNESS_PATH))


def _stage_archive(task: Task, extra: Mapping[str, bytes] | None = None,
                   account: Account = SANDBOX_ACCOUNT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes, mode: int) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        top = tarfile.TarInfo("tests")
        top.type, top.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(top)
        for rel, host in sorted(task.verifier_files().items()):
            add(f"tests/{rel}", host.read_bytes(), 0o755 if host.stat().st_mode & 0o111 else 0o644)
        for rel, data in sorted((extra or {}).items()):
            add(f"tests/{rel}", data, 0o644)
        add("as-agent", as_agent_script(account).encode(), 0o755)
    return buf.getvalue()


async def stage_verifier(task: Task, sandbox: Sandbox,
                         extra: Mapping[str, bytes] | None = None) -> None:
    """Place the task's verifier files (and a kind's ``extra`` files, relative to ``/tests``)
    and the as-agent tool where only root can see them, and make ``/logs/verifier`` root's.
    Called when the sandbox starts, before the agent runs."""
    r = await sandbox.exec(["sh", "-c", _STAGE],
                           stdin=_stage_archive(task, extra, account_of(sandbox)), user="root",
                           cwd="/", env=HARNESS_ENV)
    if r.exit_code != 0:
        raise SandboxError(f"staging the verifier files: {r.stderr.strip()[-500:]}")


async def unstage_verifier(task: Task, sandbox: Sandbox, prepare: str | None = None,
                           extra: Mapping[str, bytes] | None = None) -> None:
    """At verification: move the staged files to ``/tests`` and empty ``/logs/verifier``
    (``prepare``: a kind's shell step, run as root after; ``extra``: as for staging, used when
    the sandbox was not staged at its start)."""
    steps = _UNSTAGE
    if task.verifier_user != "root":  # the task's [verifier] user must read /tests, write rewards
        steps += (f"chmod -R a+rX {TESTS_MOUNT}\n"
                  f"chown -R {task.verifier_user}:{task.verifier_user} {VERIFIER_LOGS_DIR}\n")
    if prepare:
        steps += f"{prepare} || true\n"
    steps += "exit 0\n"
    r = await sandbox.exec(["sh", "-c", steps], user="root", cwd="/", env=HARNESS_ENV)
    if r.exit_code == _NOT_STAGED:  # a caller that did not stage at start: stage now
        await stage_verifier(task, sandbox, extra)
        r = await sandbox.exec(["sh", "-c", steps], user="root", cwd="/", env=HARNESS_ENV)
    if r.exit_code != 0:
        raise SandboxError(f"placing the verifier files: {r.stderr.strip()[-500:]}")


async def run_test_command(task: Task, sandbox: Sandbox, ctx: VerifierContext, *,
                           env: Mapping[str, str] | None = None,
                           prepare: str | None = None) -> CommandRun:
    """Move the staged verifier files to ``/tests``, run the test command as the task's verifier
    user (root unless ``[verifier] user`` says ``agent``) and store its output.

    ``env`` is the kind's own environment (the task's verifier environment overrides it);
    ``prepare`` is a kind's extra shell step, run as root after ``/logs/verifier`` is emptied.
    """
    await unstage_verifier(task, sandbox, prepare)
    r = await sandbox.exec(harness_bash(task.test_command),
                           user=task.verifier_user, timeout=ctx.timeout_s,
                           env={**(env or {}), **task.verifier_env, "TEST_DIR": TESTS_MOUNT,
                                "AS_AGENT": AS_AGENT})
    out = ctx.artifact_dir / "verifier.log"
    out.write_text(f"$ {task.test_command}\n--- exit {r.exit_code}"
                   f"{' (timed out)' if r.timed_out else ''}\n--- stdout\n{r.stdout}\n"
                   f"--- stderr\n{r.stderr}\n")
    return CommandRun(result=r, log=ctx.add_artifact("verifier.log", out, "verifier_output"))


def script_ending(result: ExecResult, lines: int = 3) -> str:
    """How the test script ended, for a verdict that found no results in its output: its exit
    status and the last non-empty lines of its stderr and stdout (``bash: pytest: command not
    found``, ``ModuleNotFoundError: …``, ``No such file or directory``), colour codes removed."""
    parts = [f"the test script exited with status {result.exit_code}"]
    for name, text in (("stderr", result.stderr), ("stdout", result.stdout)):
        tail = [ln.strip()[:200] for ln in strip_ansi(text).splitlines() if ln.strip()][-lines:]
        if tail:
            parts.append(f"its {name} ended: " + " | ".join(tail))
    if len(parts) == 1:
        return f"{parts[0]} and printed nothing"
    return "; ".join(parts)


def killed_by_signal(result: ExecResult) -> int | None:
    """The signal that ended the test command (its shell's 128+N, or a negative status), if any."""
    if result.timed_out:
        return None
    if result.exit_code < 0:
        return -result.exit_code
    if result.exit_code > 128:
        return result.exit_code - 128
    return None


def verdict_of(task: Task, ctx: VerifierContext, run: CommandRun, score: Score) -> Verdict:
    """The verdict of a test run. A timed-out command without a reward says so; a command killed
    by a signal has no reward at all (whatever it left behind is not trusted): a fail with a
    stated problem."""
    reward, rewards, problem = score
    signal = killed_by_signal(run.result)
    if signal is not None:
        reward, rewards = None, {}
        problem = (f"the verifier was killed by signal {signal} (exit status "
                   f"{run.result.exit_code}): its reward is not trusted")
    elif run.result.timed_out and reward is None:
        problem = f"the verifier timed out after {ctx.timeout_s:.0f}s"
    if problem is not None:  # stored as the trial's error: no terminal codes
        problem = strip_ansi(problem)
    return Verdict(reward=reward, rewards=rewards, pass_threshold=task.pass_threshold,
                   problem=problem, artifacts=(run.log,), command_s=run.result.duration_s)

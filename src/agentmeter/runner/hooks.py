"""A task's own commands around the agent: the image's ENTRYPOINT (started with the sandbox, as
Harbor's container runs it), Harbor's environment healthcheck (before the agent) and
``[[verifier.collect]]`` hooks (after it, before artifacts are collected)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import ExecResult, LayerBuildError, SandboxError, harness_bash
from agentmeter.tasks.models import CollectHook, Healthcheck, Task

if TYPE_CHECKING:
    from agentmeter.sandbox.dockerfile import ImageMetadata

#: Harbor's conventional artifacts directory: always collected, writable by every user
ARTIFACTS_DIR = "/logs/artifacts"


#: the command Harbor's compose gives the main service: the ENTRYPOINT gets it as arguments
KEEP_ALIVE = ("sh", "-c", "sleep infinity")


def final_stage(dockerfile: Path | None) -> ImageMetadata | None:
    """The final stage's metadata (ENTRYPOINT, CMD, …) of a Dockerfile, if it parses."""
    if dockerfile is None:
        return None
    from agentmeter.sandbox.dockerfile import parse_dockerfile

    try:
        parsed = parse_dockerfile(dockerfile.read_text(), str(dockerfile))
    except (LayerBuildError, OSError, UnicodeDecodeError):
        return None  # the build says what is wrong
    stages = parsed.all_stages()
    return stages[-1].metadata if stages else None


def entrypoint(task: Task) -> list[str] | None:
    """The ENTRYPOINT of the task's Dockerfile (final stage), if it has one."""
    meta = final_stage(task.dockerfile)
    return (meta.entrypoint or None) if meta is not None else None


def start_entrypoint(sandbox: Sandbox, task: Task) -> asyncio.Task[ExecResult] | None:
    """Start the image's ENTRYPOINT in the background, as root, with Harbor's keep-alive
    command as its arguments (a service the task's healthcheck waits for: hello-healthcheck).
    The caller cancels the returned task before it stops the sandbox."""
    argv = entrypoint(task)
    if argv is None:
        return None
    return asyncio.ensure_future(sandbox.exec([*argv, *KEEP_ALIVE], user="root",
                                              output_limit=64_000))


async def stop_entrypoint(job: asyncio.Task[ExecResult] | None) -> None:
    if job is None:
        return
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError, SandboxError):
        await job


def output_tail(text: str) -> str:
    """A command output's last non-empty line, cut to 300 characters (what a message quotes)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


async def finish_despite_cancellation(aw: Awaitable[None]) -> None:
    """Await cleanup to its end even if this task is cancelled again meanwhile."""
    job = asyncio.ensure_future(aw)
    while not job.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(job)
    job.result()


async def healthcheck(sandbox: Sandbox, check: Healthcheck) -> int:
    """Run ``check`` until it passes (Docker HEALTHCHECK semantics); returns the tries it took.
    Raises SandboxError naming the command and its last output when it never does."""
    started = time.monotonic()
    tries = failures = 0
    while True:
        tries += 1
        res = await sandbox.exec(check.command, user="root", timeout=check.timeout_s)
        if res.ok:
            return tries
        in_start_period = time.monotonic() - started < check.start_period_s
        if not in_start_period:
            failures += 1
            if failures > check.retries:
                why = "timed out" if res.timed_out else f"exit {res.exit_code}"
                raise SandboxError(
                    f"the environment's healthcheck never passed ({tries} tries; last: {why}: "
                    f"{output_tail(res.stderr or res.stdout)}): {check.command}")
        await asyncio.sleep(check.start_interval_s if in_start_period else check.interval_s)


async def collect(sandbox: Sandbox, hooks: tuple[CollectHook, ...],
                  services: Mapping[str, Sandbox] | None = None) -> list[str]:
    """Run the collect hooks in order, each in its service's sandbox (``services``: the running
    compose sidecars; "main" is ``sandbox``); best effort, as in Harbor: each failure is
    returned as a line for the trial's record, never raised."""
    problems: list[str] = []
    for hook in hooks:
        box = sandbox if hook.service == "main" else (services or {}).get(hook.service)
        if box is None:
            problems.append(f"{hook.command}: service {hook.service!r} is not running")
            continue
        try:
            # after the agent: bash not from an image PATH the agent may have written
            res = await box.exec(harness_bash(hook.command), user=hook.user,
                                 timeout=hook.timeout_s)
        except SandboxError as e:
            problems.append(f"{hook.command}: {e}")
            continue
        if not res.ok:
            why = "timed out" if res.timed_out else f"exit {res.exit_code}"
            problems.append(f"{hook.command}: {why}: {output_tail(res.stderr or res.stdout)}")
    return problems

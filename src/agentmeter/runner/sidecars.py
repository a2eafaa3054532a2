"""A trial's compose sidecars (tasks/compose.py): started after the main sandbox and before the
agent, stopped with the trial.

Each sidecar is a sandbox of its own, built from its service's ``build`` context with the
backend's builders (or started from its ``image``), with the same defences as the main sandbox
(its own user, mount, PID namespaces, seccomp filter, capabilities and limits: it runs the
task's code). It has no network of its own: it joins the main sandbox's network namespace
(``SandboxSpec.join_network``; on docker ``--network container:``), so it reaches exactly what
the agent's sandbox reaches and nothing more, and every service name resolves to 127.0.0.1 in
every sandbox of the trial (``/etc/hosts``). Its process is the image's ENTRYPOINT + CMD (or the
service's ``entrypoint``/``command``), run as root of the sidecar's sandbox. Harbor's
``depends_on`` conditions are honoured: a service starts once its dependencies are started /
healthy / exited 0, and the agent once ``main``'s are.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from dataclasses import dataclass, field

from agentmeter.runner import hooks
from agentmeter.sandbox.protocol import Sandbox, SandboxBackend
from agentmeter.sandbox.spec import (
    BaseImage,
    ExecResult,
    LayerSpec,
    SandboxError,
    SandboxSpec,
    task_limits,
)
from agentmeter.tasks.models import DependsCondition, Sidecar, Task

#: how much of a sidecar's output is kept (its tail is quoted when it fails)
OUTPUT_LIMIT = 64_000


def sidecar_spec(task: Task, sidecar: Sidecar, join: str) -> SandboxSpec:
    """The sidecar's sandbox, in the network of the running sandbox ``join`` (an id)."""
    layers: tuple[LayerSpec, ...] = ()
    image = None
    if sidecar.dockerfile is not None:
        layers = (LayerSpec(kind="dockerfile", source=sidecar.dockerfile.read_text(),
                            origin=str(sidecar.dockerfile), context=sidecar.context,
                            label=f"{task.id} service {sidecar.name}",
                            build_timeout_s=task.build_timeout_s),)
    elif sidecar.image is not None:
        image = BaseImage(ref=sidecar.image, origin=sidecar.origin)
    return SandboxSpec(image=image, layers=layers, workdir=sidecar.workdir,
                       env=dict(sidecar.environment), user="root",
                       limits=task_limits(None, None, None), network="none",
                       hostname=sidecar.name, join_network=join)


async def prepare(backend: SandboxBackend, task: Task) -> None:
    """Build (or find cached) every sidecar's image before the trials start."""
    for sidecar in task.sidecars:
        await backend.prepare(sidecar_spec(task, sidecar, join="(prepare)"))


def service_argv(sidecar: Sidecar) -> list[str]:
    """ENTRYPOINT + CMD as docker composes them: a compose ``entrypoint`` drops the image's CMD."""
    meta = hooks.final_stage(sidecar.dockerfile)
    entrypoint = list(meta.entrypoint or []) if meta is not None else []
    cmd = list(meta.cmd or []) if meta is not None else []
    if sidecar.entrypoint is not None:
        entrypoint, cmd = list(sidecar.entrypoint), []
    if sidecar.command is not None:
        cmd = list(sidecar.command)
    return entrypoint + cmd


def proxy_bypass(task: Task) -> dict[str, str]:
    """The main sandbox's ``no_proxy`` with the service names added (its HTTP proxy, if any,
    would otherwise be asked for them); the task's own environment wins over it."""
    if not task.sidecars:
        return {}
    hosts = ",".join(["localhost", "127.0.0.1", "::1", *(s.name for s in task.sidecars)])
    return {"no_proxy": hosts, "NO_PROXY": hosts}


def hosts_line(task: Task) -> str:
    return "127.0.0.1 " + " ".join(s.name for s in task.sidecars)


async def add_hosts(box: Sandbox, task: Task) -> None:
    """Every service name resolves to 127.0.0.1 (the sandboxes share one network namespace)."""
    line = hosts_line(task)
    res = await box.exec(["sh", "-c", 'grep -qxF "$1" /etc/hosts 2>/dev/null || '
                          'echo "$1" >> /etc/hosts', "sh", line], user="root", cwd="/")
    if not res.ok:
        raise SandboxError(f"cannot name the compose services in /etc/hosts: "
                           f"{(res.stderr or res.stdout).strip()[-300:]}")


@dataclass
class Sidecars:
    """The running sidecars of one trial; ``stop`` ends them all (idempotent)."""

    boxes: dict[str, Sandbox] = field(default_factory=dict)
    jobs: dict[str, asyncio.Task[ExecResult]] = field(default_factory=dict)
    healthy: set[str] = field(default_factory=set)

    def box(self, service: str | None) -> Sandbox | None:
        return None if service in (None, "main") else self.boxes.get(service or "")

    async def stop(self) -> None:
        jobs, self.jobs = self.jobs, {}
        for job in jobs.values():
            job.cancel()
        for job in jobs.values():
            with contextlib.suppress(asyncio.CancelledError, SandboxError):
                await job
        boxes, self.boxes = self.boxes, {}
        for box in reversed(list(boxes.values())):
            with contextlib.suppress(SandboxError, OSError):
                await box.stop()

    async def wait_for(self, task: Task, deps: dict[str, DependsCondition]) -> None:
        """Until each dependency meets its condition; raises SandboxError naming the service."""
        by_name = {s.name: s for s in task.sidecars}
        for name, condition in deps.items():
            if condition == "service_started":
                continue
            job = self.jobs[name]
            if condition == "service_completed_successfully":
                res = await job
                if not res.ok:
                    raise SandboxError(f"compose service {name!r} exited {res.exit_code}: "
                                       f"{_tail(res)}")
                continue
            check = by_name[name].healthcheck
            if check is None:
                raise SandboxError(f"compose service {name!r}: depends_on says service_healthy "
                                   "but it has no healthcheck")
            if name in self.healthy:
                continue
            try:
                await hooks.healthcheck(self.boxes[name], check)
            except SandboxError as e:
                why = f"; its process exited {job.result().exit_code}: {_tail(job.result())}" \
                    if job.done() and not job.cancelled() and job.exception() is None else ""
                raise SandboxError(f"compose service {name!r}: {e}{why}") from e
            self.healthy.add(name)


def _tail(res: ExecResult) -> str:
    return hooks.output_tail(res.stderr or res.stdout)


async def start_sidecars(backend: SandboxBackend, task: Task, main: Sandbox) -> Sidecars:
    """Start the task's sidecars in the main sandbox's network, each once its dependencies are
    met, then wait for ``main``'s dependencies. On failure, what was started is stopped."""
    running = Sidecars()
    try:
        for sidecar in task.sidecars:
            await running.wait_for(task, sidecar.depends_on)
            box = await backend.start(sidecar_spec(task, sidecar, main.id))
            running.boxes[sidecar.name] = box
            await add_hosts(box, task)
            argv = service_argv(sidecar)
            if not argv:
                raise SandboxError(f"{sidecar.origin}: no command (the image has no CMD or "
                                   "ENTRYPOINT and the service sets none)")
            running.jobs[sidecar.name] = asyncio.ensure_future(
                box.exec(argv, user="root", output_limit=OUTPUT_LIMIT))
        if task.sidecars:
            await add_hosts(main, task)
        await running.wait_for(task, task.main_depends_on)
    except BaseException:
        await hooks.finish_despite_cancellation(running.stop())
        raise
    return running


def describe(sidecar: Sidecar) -> str:
    return f"{sidecar.name}: {shlex.join(service_argv(sidecar))}"

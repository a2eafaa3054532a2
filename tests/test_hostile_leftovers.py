"""What an agent leaves behind for the verifier phase, attacked on both backends: detached
daemons (setsid, nohup) that would tamper with the workspace later, setuid binaries that would
lift it to root; and the limits a task without any gets."""

from __future__ import annotations

import os
import secrets
import subprocess
import warnings
from pathlib import Path

import pytest
from polling import eventually_async
from taskgen import make_task

from agentmeter.agents.registry import make_agent
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox, SandboxBackend
from agentmeter.sandbox.spec import (
    AGENT_USER,
    DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB,
    DEFAULT_PIDS,
    SandboxSpec,
)
from agentmeter.tasks.suite import load_task

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    name = request.param
    return request.getfixturevalue(f"{name}_backend")  # type: ignore[no-any-return]


def _host_pids_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker`` (docker's and bwrap's are visible)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="watches sandbox processes from the host's /proc")
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_detached_agent_processes_do_not_reach_the_verifier(backend: SandboxBackend) -> None:
    marker = f"amtamper{secrets.token_hex(4)}"
    tamper = "while :; do echo forged >> \"$PWD/tampered\"; sleep 0.2; done"
    sb: Sandbox = await backend.start(SandboxSpec(user=AGENT_USER))
    try:
        await sb.exec(["chown", "agent:agent", sb.workdir], user="root")
        r = await sb.exec(f"setsid sh -c '{tamper}' {marker}-setsid </dev/null >/dev/null 2>&1 &"
                          f" nohup sh -c '{tamper}' {marker}-nohup </dev/null >/dev/null 2>&1 &"
                          " (trap '' HUP TERM; exec -a " + marker + "-trap sleep 1000) &"
                          " echo started", user=AGENT_USER)
        assert r.stdout.strip() == "started", r.stderr
        survivors = _host_pids_with(marker)
        if backend.name == "docker":  # the threat is real there: the exec ended, they did not
            assert len(survivors) >= 3, survivors
        killed = await sb.kill_user_processes(AGENT_USER)
        if backend.name == "docker":  # (locally the exec's PID namespace is already going away)
            assert killed >= len(survivors)
        assert await eventually_async(lambda: not _host_pids_with(marker)), _host_pids_with(marker)
        # and from inside: no process of the agent's uid, the workspace no longer changes
        before = (await sb.exec("cat tampered 2>/dev/null | wc -l", user="root")).stdout
        r = await sb.exec("sleep 0.5; cat tampered 2>/dev/null | wc -l;"
                          " for d in /proc/[0-9]*; do grep -qs '^Uid:\\s*1000\\s' $d/status"
                          " && echo \"left ${d#/proc/}\"; done; true", user="root")
        assert r.stdout.split()[0] == before.strip()
        assert "left" not in r.stdout, r.stdout
        assert await sb.kill_user_processes(AGENT_USER) == 0
    finally:
        await sb.stop()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_setuid_binaries_do_not_lift_the_agent(backend: SandboxBackend) -> None:
    """A setuid-root shell the agent prepared (or found in an image) stays the agent's uid:
    no_new_privs (bwrap sets it; docker: --security-opt no-new-privileges)."""
    sb = await backend.start(SandboxSpec())
    try:
        r = await sb.exec("cp /bin/bash /tmp/rootbash && chmod 4755 /tmp/rootbash", user="root")
        assert r.exit_code == 0, r.stderr
        r = await sb.exec("/tmp/rootbash -p -c 'id -u'; grep -E '^(NoNewPrivs|Seccomp):' "
                          "/proc/self/status", user=AGENT_USER)
        lines = r.stdout.split("\n")
        assert lines[0] == "1000", r.stdout + r.stderr
        assert "NoNewPrivs:\t1" in r.stdout
        assert "Seccomp:\t2" in r.stdout  # docker's default profile / ours on local
    finally:
        await sb.stop()


@pytest.fixture
def bare_task_spec(tmp_path: Path) -> SandboxSpec:
    """The spec the runner gives a task that sets no limits (limits only: its image is not
    needed to check them)."""
    task = load_task(make_task(tmp_path, "no-limits"))
    assert task.memory_mb is None and task.storage_mb is None
    spec = sandbox_spec(task, make_agent("nop"), None)
    return SandboxSpec(limits=spec.limits)


def test_a_task_without_limits_gets_the_defaults(bare_task_spec: SandboxSpec) -> None:
    lim = bare_task_spec.limits
    assert (lim.memory_mb, lim.pids, lim.disk_mb) == (DEFAULT_MEMORY_MB, DEFAULT_PIDS,
                                                      DEFAULT_DISK_MB)


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup limits need root")
async def test_default_limits_are_enforced_locally(local_backend: LocalBackend,
                                                   bare_task_spec: SandboxSpec) -> None:
    sb = await local_backend.start(bare_task_spec)
    try:
        assert sb._cgroup is not None
        mem = [d / f for d in sb._cgroup.dirs for f in ("memory.max", "memory.limit_in_bytes")
               if (d / f).exists()]
        assert [int(p.read_text()) for p in mem] == [DEFAULT_MEMORY_MB << 20]
        r = await sb.exec("df -m --output=size,fstype / | tail -1", user=AGENT_USER)
        size, fstype = r.stdout.split()
        assert fstype == "overlay" and int(size) == DEFAULT_DISK_MB  # the tmpfs upper layer
    finally:
        await sb.stop()


@pytest.mark.docker
async def test_default_limits_are_enforced_on_docker(docker_backend: DockerBackend,
                                                     bare_task_spec: SandboxSpec) -> None:
    with warnings.catch_warnings():  # storage-opt may warn: the driver cannot enforce it
        warnings.simplefilter("ignore")
        sb = await docker_backend.start(bare_task_spec)
    try:
        out = subprocess.run(["docker", "inspect", "-f",
                              "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} "
                              "{{.HostConfig.SecurityOpt}}", sb.id],
                             capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
        assert int(out[0]) == DEFAULT_MEMORY_MB << 20 and int(out[1]) == DEFAULT_PIDS
        assert "no-new-privileges" in out[2]
    finally:
        await sb.stop()


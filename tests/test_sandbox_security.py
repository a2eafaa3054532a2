"""Attacks from inside a local sandbox. Each test asserts that the attempt failed and that the
host is intact."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path

import pytest
from polling import eventually_async

from agentmeter.sandbox.cgroups import GROUP_NAME
from agentmeter.sandbox.idmap import SHIFT_BASE
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import AGENT_UID, Limits, SandboxSpec

#: the agent's uid on the host (root-run sandboxes live in the shifted id range)
AGENT_HOST_UID = SHIFT_BASE + AGENT_UID if os.geteuid() == 0 else os.geteuid()


@pytest.fixture
async def sb(local_backend: LocalBackend):  # type: ignore[no-untyped-def]
    box = await local_backend.start(SandboxSpec(limits=Limits(memory_mb=256, pids=128, disk_mb=64)))
    yield box
    await box.stop()


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_host_private_dirs_invisible(sb, user: str) -> None:  # type: ignore[no-untyped-def]
    here = Path(__file__).resolve()
    r = await sb.exec(f"ls /root; cat /root/.bash_history; ls {here.parent}; cat {here}; ls /work",
                      user=user)
    assert here.name not in r.stdout
    assert "No such file" in r.stderr or "Permission denied" in r.stderr
    r = await sb.exec("ls -A /root", user="root")
    assert set(r.stdout.split()) <= {".bashrc", ".profile"}  # the base's own /root, not the host's


async def test_host_environment_not_visible(sb) -> None:  # type: ignore[no-untyped-def]
    secret = f"sk-host-secret-{time.time_ns()}"
    os.environ["AGENTMETER_TEST_SECRET"] = secret
    try:
        r = await sb.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", user="root")
        assert secret not in r.stdout
        assert "AGENTMETER_TEST_SECRET" not in r.stdout
    finally:
        del os.environ["AGENTMETER_TEST_SECRET"]


async def test_proc_shows_only_the_sandbox(sb) -> None:  # type: ignore[no-untyped-def]
    r = await sb.exec("ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/cmdline | tr '\\0' ' '",
                      user="root")
    count, cmd1 = r.stdout.splitlines()
    assert int(count) < 10  # a fresh PID namespace, not the host's hundreds of processes
    assert "bwrap" in cmd1 or "bash" in cmd1
    # /proc/1/root is the sandbox's own root, or not root's to read (the init of an exec
    # without bwrap is never dumpable: test_sandbox_exec_direct_attacks.py)
    r = await sb.exec("ls /proc/1/root/", user="root")
    assert "workspace" in r.stdout or "Permission denied" in r.stderr, r
    r = await sb.exec("ls /proc/self/root/", user="root")
    assert "workspace" in r.stdout
    r = await sb.exec(f"ls /proc/1/root{Path(__file__).parent}", user="root")
    assert r.exit_code != 0


async def test_other_sandboxes_files_invisible(local_backend: LocalBackend, sb) -> None:  # type: ignore[no-untyped-def]
    other = await local_backend.start(SandboxSpec())
    try:
        token = f"neighbour-{time.time_ns()}"
        await other.exec(f"echo {token} > /workspace/{token}.txt; echo {token} > /tmp/{token}")
        r = await sb.exec(f"grep -rl {token} /workspace /tmp /home /root /etc /var /opt /run "
                          f"2>/dev/null; find / -xdev -name '{token}*' 2>/dev/null", user="root",
                          timeout=120)
        assert token not in r.stdout
    finally:
        await other.stop()


async def test_writes_outside_workspace_stay_in_sandbox(local_backend: LocalBackend, sb) -> None:  # type: ignore[no-untyped-def]
    r = await sb.exec("echo pwned > /etc/agentmeter-pwned; echo pwned > /usr/bin/agentmeter-pwned; "
                      "rm -f /bin/sh.bak; echo ok", user="root")
    assert r.stdout.strip() == "ok"
    assert not Path("/etc/agentmeter-pwned").exists()
    assert not Path("/usr/bin/agentmeter-pwned").exists()
    fresh = await local_backend.start(SandboxSpec())
    try:
        assert (await fresh.exec("test -e /etc/agentmeter-pwned")).exit_code == 1
    finally:
        await fresh.stop()
    r = await sb.exec("echo x > /etc/passwd", user="agent")
    assert r.exit_code != 0


async def test_no_tcp_to_host_or_public_address(sb) -> None:  # type: ignore[no-untyped-def]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        r = await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached-host", timeout=10)
        assert "reached-host" not in r.stdout and r.exit_code != 0
        # a public address (TEST-NET-3, documentation range: nothing answers even with a network)
        r = await sb.exec("timeout 5 bash -c 'exec 3<>/dev/tcp/203.0.113.7/80' && echo reached",
                          timeout=10)
        assert "reached" not in r.stdout and r.exit_code != 0
        assert "unreachable" in r.stderr.lower()  # no route at all, not a slow timeout
        r = await sb.exec("cat /proc/net/dev | grep -c :", user="root")
        assert r.stdout.strip() == "1"  # loopback only
    finally:
        srv.close()


async def test_fork_bomb_is_contained(sb) -> None:  # type: ignore[no-untyped-def]
    # count the agent's host uid only, and not in other sandboxes' cgroups: other processes on a
    # shared machine come and go (another xdist worker's trial may run its own fork bomb)
    assert sb._cgroup is not None
    ours = sb._cgroup.dirs[0].name
    host_procs = _procs_of(AGENT_HOST_UID, ours)
    r = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", user="agent", timeout=20)
    # the pids limit stopped it: forks failed inside, and the cgroup counted hitting its maximum
    assert "Resource temporarily unavailable" in r.stderr
    assert sb._cgroup is not None and _pids_max_hits(sb._cgroup.dirs) > 0
    assert _procs_of(AGENT_HOST_UID, ours) < host_procs + 128
    # the host can still fork, and the sandbox's processes are gone after the exec
    assert os.system("true") == 0
    r = await sb.exec("ps -e --no-headers | wc -l", user="root")
    assert int(r.stdout.strip() or 0) < 10


def _procs_of(uid: int, sandbox: str) -> int:
    """Processes of ``uid`` on the host, but for those in another agentmeter sandbox's cgroup
    (the cgroup named ``sandbox`` and no agentmeter cgroup at all both count)."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{p}").st_uid != uid:
                    continue
                groups = Path(f"/proc/{p}/cgroup").read_text()
                theirs = f"/{GROUP_NAME}/" in groups
                n += not theirs or any(line.endswith(f"/{GROUP_NAME}/{sandbox}")
                                       for line in groups.splitlines())
    return n


def _pids_max_hits(dirs: list[Path]) -> int:
    for d in dirs:
        events = d / "pids.events"
        if events.exists():
            return sum(int(v) for k, v in (line.split() for line in events.read_text().splitlines())
                       if k == "max")
    return 0


async def test_cpu_limit_is_written_to_the_cgroup(local_backend: LocalBackend) -> None:
    box = await local_backend.start(SandboxSpec(limits=Limits(cpus=0.5)))
    try:
        assert box._cgroup is not None
        d = box._cgroup.dirs[0]
        quota = (d / "cpu.max").read_text().split()[0] if (d / "cpu.max").exists() \
            else (d / "cpu.cfs_quota_us").read_text().strip()
        assert quota == "50000"
        # the sandbox's processes are in that group
        running = asyncio.create_task(box.exec("sleep 30", user="agent"))
        group = box._cgroup
        assert await eventually_async(lambda: bool(group.pids()))
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        await box.stop()


async def test_huge_allocation_is_killed(sb) -> None:  # type: ignore[no-untyped-def]
    # bash holds a command substitution in memory: 30 GB against a 256 MB limit
    r = await sb.exec("a=$(head -c 30G /dev/zero | tr '\\0' a); echo held=${#a}", user="agent",
                      timeout=120)
    assert not r.timed_out
    assert "held=" not in r.stdout
    assert r.exit_code != 0


async def test_filling_the_disk_stops_at_the_cap(sb) -> None:  # type: ignore[no-untyped-def]
    r = await sb.exec("dd if=/dev/zero of=/workspace/big bs=1M count=500 2>&1; "
                      "du -sm /workspace/big | cut -f1", user="agent", timeout=60)
    assert "No space left" in r.stdout
    assert int(r.stdout.strip().splitlines()[-1]) <= 64


async def test_copy_out_never_follows_links_outside(sb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    await sb.exec(f"mkdir -p out && ln -s /etc/passwd out/abs && ln -s ../../../../../{outside} out/rel "
                  f"&& ln -s {outside} out/hostpath && echo data > out/plain && ln out/plain out/hard",
                  user="agent")
    dest = tmp_path / "dest"
    await sb.copy_out("/workspace/out", dest)
    assert (dest / "plain").read_text() == "data\n"
    for name in ("abs", "rel", "hostpath"):
        p = dest / name
        if p.is_symlink():
            target = (dest / os.readlink(p)).resolve()
            assert dest.resolve() in target.parents
    assert outside.read_text() == "host file"
    assert not (dest / "abs").exists() or "root:" not in (dest / "abs").read_text()

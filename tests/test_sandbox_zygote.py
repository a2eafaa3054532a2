"""Attacks on the zygote of root-run local sandboxes (zygote.py): an exec the keeper forks keeps
every defence of the chain of programs it replaces, and nothing in a sandbox can reach the
keeper's socket to have it run something outside the sandbox's limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentmeter.sandbox import idmap, local_dirs, zygote
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerSpec, Limits, SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote serves root-run sandboxes")


async def test_exec_through_the_zygote_keeps_uid_map_seccomp_and_cgroup(
        local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec(limits=Limits(pids=64)))
    try:
        assert isinstance(sb._keeper, zygote.Keeper)
        r = await sb.exec("id -u; cat /proc/self/uid_map; grep -E '^(Seccomp|NoNewPrivs|CapEff):' "
                          "/proc/self/status; cat /sys/fs/cgroup/pids.max 2>/dev/null "
                          "|| cat /proc/self/cgroup", user="agent")
        assert r.exit_code == 0, r
        lines = r.stdout.split("\n")
        assert lines[0] == "1000"
        assert lines[1].split() == ["0", str(idmap.SHIFT_BASE), str(idmap.SHIFT_SIZE)]
        assert "Seccomp:\t2" in r.stdout and "NoNewPrivs:\t1" in r.stdout
        assert "CapEff:\t0000000000000000" in r.stdout
        # the exec runs in the sandbox's cgroup: seen from the host, its processes are there
        assert sb._cgroup is not None
        cgroup = sb._cgroup
        running = asyncio.ensure_future(sb.exec(["sleep", "3"], user="agent", timeout=10))
        seen: set[int] = set()
        for _ in range(300):
            if seen := cgroup.pids():
                break
            await asyncio.sleep(0.01)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        assert seen
    finally:
        await sb.stop()


async def test_a_sandbox_cannot_send_requests_to_its_zygote(local_backend: LocalBackend) -> None:
    """A root process in the sandbox writes a forged exec request (a command run outside the
    sandbox, in the keeper's mount namespace) to every socket it holds; none may be the
    keeper's, and the command must not run."""
    where = Path(tempfile.mkdtemp(prefix="agentmeter-zygote-"))  # reachable by the shifted root
    where.chmod(0o777)
    mark = where / "escaped"
    req = ('{"op":"exec","id":4242,"argv":["/bin/sh","-c","touch ' + str(mark) + '"],'
           '"env":{},"cgroup":[],"keyring":false}')
    hdr = "".join(f"\\{b:03o}" for b in len(req).to_bytes(4, "big"))
    script = (f"req='{req}'\n"
              "for f in /proc/self/fd/*; do n=${f##*/}\n"
              '  case "$(readlink "$f")" in socket:*) echo "SOCKET:$n"\n'
              f'    eval "printf \'{hdr}%s\' \\"\\$req\\" >&$n" ;; esac\n'
              "done\n"
              "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c socket: || true\n")
    sb = await local_backend.start(SandboxSpec())
    try:
        r = await sb.exec(["bash", "-c", script], user="root")
        await asyncio.sleep(0.3)  # a forged request would have run by now
        r2 = await sb.exec(["true"])  # the keeper still serves its harness
    finally:
        await sb.stop()
    assert r.exit_code == 0, r
    assert "SOCKET:" not in r.stdout, r.stdout
    assert r.stdout.strip().splitlines()[-1] == "0", r.stdout
    escaped = mark.exists()
    shutil.rmtree(where, ignore_errors=True)
    assert not escaped
    assert r2.exit_code == 0


#: a host directory the shifted root could write to, named by an image's symlink
TARGET = "/tmp/agentmeter-zygote-symlink-target"


async def test_the_start_s_workdir_is_made_inside_the_sandbox_through_symlinks(
        local_backend: LocalBackend) -> None:
    """The keeper makes a start's workdir itself (no bwrap): an image whose workdir's parent is
    a symlink to an absolute path must get the directory inside its own tree, never on the
    host at that path."""
    host = Path(TARGET)
    shutil.rmtree(host, ignore_errors=True)
    host.mkdir(mode=0o777)
    host.chmod(0o777)
    spec = SandboxSpec(layers=(LayerSpec(kind="script", network="none",
                                         source=f"mkdir -p {TARGET} && ln -s {TARGET} /wlink"),),
                       workdir="/wlink/made")
    try:
        sb = await local_backend.start(spec)
        try:
            r = await sb.exec(["test", "-d", f"{TARGET}/made"], user="root")
        finally:
            await sb.stop()
        assert not (host / "made").exists()
        assert r.exit_code == 0
    finally:
        shutil.rmtree(host, ignore_errors=True)


#: an exec's view of its /dev: the mounts there (mount point, own flags, fs type, super
#: options but the anonymous device numbers) and the owners and modes of what is in it
DEV_VIEW = ("awk '$5 ~ \"^/dev\" {print $5, $6, $(NF-2), $NF}' /proc/self/mountinfo; "
            "ls -lnA --time-style=+ /dev /dev/pts /dev/shm | sed 's/  */ /g'; "
            "touch /dev/x 2>/dev/null && echo WROTE-DEV; ln -sf /x /dev/stdout 2>/dev/null "
            "&& echo RELINKED; echo hi > /dev/null && echo NULL-OK")


async def test_the_prepared_dev_is_exactly_bwraps_dev(local_backend: LocalBackend) -> None:
    """The keeper prepares /dev once per sandbox (zygote_calls.make_dev) and each exec binds
    it: an exec must see exactly what bwrap's own --dev gives (the same mounts with the same
    flags: nodev on the tmpfs, nosuid everywhere, noexec on devpts; the same nodes, links,
    owners and modes), and an agent may not change it."""
    sb = await local_backend.start(SandboxSpec())
    try:
        assert isinstance(sb._keeper, zygote.Keeper) and sb._keeper.dev
        cmd = sb._command(["true"], "/", {}, "agent")
        assert cmd[cmd.index("--dev-bind") + 1:][:2] == ["/run/agentmeter-stage/dev", "/dev"]
        prepared = await sb.exec(DEV_VIEW, user="agent")
        sb._keeper.dev = False  # the same sandbox, bwrap's --dev
        assert "--dev-bind" not in sb._command(["true"], "/", {}, "agent")
        own = await sb.exec(DEV_VIEW, user="agent")
    finally:
        await sb.stop()
    assert prepared.exit_code == 0 and own.exit_code == 0, (prepared, own)
    assert prepared.stdout == own.stdout, (prepared.stdout, own.stdout)
    lines = prepared.stdout.splitlines()
    assert "/dev rw,nosuid,nodev,relatime tmpfs rw,mode=755,uid=1073741824,gid=1073741824" in lines
    assert "WROTE-DEV" not in prepared.stdout and "RELINKED" not in prepared.stdout
    assert "NULL-OK" in prepared.stdout


async def test_stop_kills_the_execs_and_removes_the_sandbox(local_backend: LocalBackend) -> None:
    """stop returns before the keeper's namespaces are torn down (their removal and the
    directory's rmtree happen on a thread): what ran in the sandbox is killed all the same, and
    its directory goes."""
    def running_marked() -> bool:
        for p in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if p.isdigit() and marker.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                    return True
        return False

    sb = await local_backend.start(SandboxSpec())
    marker = f"am-stop-{os.getpid()}-{id(sb)}"
    running = asyncio.ensure_future(sb.exec(f"exec -a {marker} sleep 60", user="agent"))
    for _ in range(500):
        if running_marked():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the exec never started")
    await sb.stop()
    with contextlib.suppress(Exception):
        await running
    assert not sb.dir.exists()
    for _ in range(500):  # the exec's own init is killed with it (its PID namespace ends)
        if not running_marked():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the exec survived stop")
    await asyncio.to_thread(local_dirs.drain)
    assert not (local_dirs.gone_dir() / sb.dir.name).exists()


async def test_keepers_forked_ahead_give_each_sandbox_namespaces_of_its_own(
        local_backend: LocalBackend) -> None:
    """The fork server forks the next keeper ahead with its mount and network namespaces made:
    two sandboxes started one after the other must still have namespaces of their own, none
    the host's, with loopback up and low ports allowed in each."""
    first = await local_backend.start(SandboxSpec(base="host"))  # the host's python3
    second = await local_backend.start(SandboxSpec(base="host"))
    try:
        seen = []
        for sb in (first, second):
            assert isinstance(sb._keeper, zygote.Keeper)
            seen.append(tuple(os.readlink(f"/proc/{sb._keeper.pid}/ns/{n}") for n in ("net", "mnt")))
            r = await sb.exec(["python3", "-c", "import socket; s = socket.socket(); "
                               "s.bind(('127.0.0.1', 80)); s.listen(); c = socket.socket(); "
                               "c.connect(('127.0.0.1', 80)); print('LO-UP')"], user="agent")
            assert "LO-UP" in r.stdout, r
    finally:
        await first.stop()
        await second.stop()
    host = tuple(os.readlink(f"/proc/self/ns/{n}") for n in ("net", "mnt"))
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]
    assert host[0] not in (seen[0][0], seen[1][0]) and host[1] not in (seen[0][1], seen[1][1])


async def test_a_keeper_forked_ahead_never_binds_a_stale_view_of_the_host(
        local_backend: LocalBackend, tmp_path: Path) -> None:
    """A keeper forked ahead holds a copy of the host's mounts from its fork; a task mount whose
    source the host has since mounted over must show what is mounted there now, not what the
    new mount hides (the fork server forks anew after any mount on the host)."""
    import subprocess

    from agentmeter.sandbox.spec import Mount

    await (await local_backend.start(SandboxSpec())).stop()  # the next keeper is forked ahead
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "marker").write_text("HIDDEN")
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tmp_path)], check=True)
    try:
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "marker").write_text("MOUNTED")
        sb = await local_backend.start(SandboxSpec(mounts=(
            Mount(source=tmp_path / "src", target="/m", read_only=True),)))
        try:
            r = await sb.exec(["cat", "/m/marker"], user="root")
        finally:
            await sb.stop()
    finally:
        subprocess.run(["umount", "-l", str(tmp_path)], check=False)
    assert r.stdout == "MOUNTED", r

"""Attacks on the host from root and agent processes in local sandboxes run as root: host-global
sysctls, proc files, mounts, kernel keyrings and host ids. Each test asserts containment.

Writes to host-global files are only *opened* for writing (never written), so a failed defence
cannot damage the machine running the tests."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import eventually_async

import agentmeter
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import Mount, SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="attacks on a root-run harness")

#: host-global files whose opening for writing is an escape primitive or a host-wide action
HOST_GLOBAL_WRITABLES = ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe",
                         "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger")


def _open_for_writing(paths: tuple[str, ...]) -> str:
    """Shell that prints OPENED:<path> for each path it could open for writing (writes nothing)."""
    return "; ".join(f"(exec 3>>{p}) 2>/dev/null && echo OPENED:{p}" for p in paths) + "; true"


def _keyctl() -> str:
    path = shutil.which("keyctl")
    if path is None:
        pytest.skip("keyctl (keyutils) is not installed")
    return path


@pytest.fixture
async def sb(local_backend: LocalBackend):  # type: ignore[no-untyped-def]
    box = await local_backend.start(SandboxSpec())
    yield box
    await box.stop()


@pytest.fixture
async def host_sb(local_backend: LocalBackend):  # type: ignore[no-untyped-def]
    """A ``host``-base sandbox: the host's /usr (keyctl, python3) inside."""
    _keyctl()
    box = await local_backend.start(SandboxSpec(base="host"))
    yield box
    await box.stop()


@pytest.mark.parametrize("user", ["root", "agent"])
async def test_host_global_sysctls_cannot_be_opened_for_writing(sb, user: str) -> None:  # type: ignore[no-untyped-def]
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    r = await sb.exec(_open_for_writing(HOST_GLOBAL_WRITABLES), user=user)
    assert "OPENED" not in r.stdout, r.stdout
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before


async def test_proc_masks_survive_umount_remount_and_new_namespaces(sb) -> None:  # type: ignore[no-untyped-def]
    """Root tries to lift the read-only /proc/sys: umount, remount rw, a fresh proc mount, and
    the same from a nested user namespace where it would hold every capability."""
    core = "/proc/sys/kernel/core_pattern"
    attempt = (f"umount /proc/sys; umount -l /proc/sys; mount -o remount,rw /proc/sys; "
               f"mkdir -p /tmp/p && mount -t proc proc /tmp/p && echo MOUNTED-PROC; "
               f"{_open_for_writing((core, '/tmp/p/sys/kernel/core_pattern'))}")
    r = await sb.exec(attempt, user="root")
    assert "OPENED" not in r.stdout and "MOUNTED-PROC" not in r.stdout, r.stdout
    nested = f"unshare -Urm --mount-proc sh -c '{attempt}'; unshare -Urm sh -c '{attempt}'"
    r = await sb.exec(nested, user="root")
    assert "OPENED" not in r.stdout, r.stdout
    r = await sb.exec("grep ' /proc/sys ' /proc/self/mountinfo", user="root")
    fields = r.stdout.split()
    assert fields[4] == "/proc/sys" and "ro" in fields[5].split(","), r.stdout


@pytest.mark.parametrize("name", ["kcore", "keys", "key-users", "timer_list", "sched_debug"])
async def test_sensitive_proc_files_are_masked(sb, name: str) -> None:  # type: ignore[no-untyped-def]
    if not os.path.exists(f"/proc/{name}"):
        pytest.skip(f"this kernel has no /proc/{name}")
    r = await sb.exec(f"head -c 4096 /proc/{name} | wc -c", user="root")
    assert r.stdout.strip() == "0", (r.stdout, r.stderr)


async def test_host_root_keyrings_are_invisible(host_sb) -> None:  # type: ignore[no-untyped-def]
    keyctl = _keyctl()
    name, secret = f"am-host-{secrets.token_hex(4)}", f"host-secret-{secrets.token_hex(8)}"
    serial = subprocess.run([keyctl, "add", "user", name, secret, "@u"], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        for user in ("root", "agent"):
            r = await host_sb.exec(
                f"keyctl search @u user {name}; keyctl search @s user {name}; keyctl print {serial}; "
                f"keyctl pipe {serial}; keyctl link {serial} @s && keyctl print {serial}; "
                f"keyctl show @u; keyctl show @s", user=user)
            assert secret not in r.stdout and name not in r.stdout, (user, r.stdout)
            # and it cannot write into host root's user keyring either
            await host_sb.exec(f"keyctl add user {name}-planted x {serial}; "
                               f"keyctl add user {name}-planted x @u", user=user)
        found = subprocess.run([keyctl, "search", "@u", "user", f"{name}-planted"],
                               capture_output=True, text=True)
        assert found.returncode != 0
    finally:
        subprocess.run([keyctl, "unlink", serial, "@u"], capture_output=True)


async def test_agent_keys_do_not_reach_other_sandboxes(  # type: ignore[no-untyped-def]
        local_backend: LocalBackend, host_sb) -> None:
    """A trial's agent leaves an answer in its user and session keyrings; the next trial's agent
    (while the first still runs, and after it ended) looks for it by name and by serial."""
    name, secret = f"am-chan-{secrets.token_hex(4)}", f"answer-{secrets.token_hex(8)}"
    r = await host_sb.exec(f"keyctl add user {name} {secret} @u; keyctl add user {name}-s {secret} @s",
                           user="agent")
    serials = r.stdout.split()
    if not serials:  # the seccomp filter refuses the key syscalls: the channel is closed there
        assert r.stderr.count("Operation not permitted") == 2, r.stderr
        return
    assert len(serials) == 2, (r.stdout, r.stderr)  # the attempt itself worked
    look = "; ".join([f"keyctl search @u user {name}", f"keyctl search @s user {name}-s",
                      *(f"keyctl print {s}; keyctl link {s} @s && keyctl print {s}" for s in serials),
                      "keyctl show @u", "keyctl show @s"])
    later = await local_backend.start(SandboxSpec(base="host"))
    try:
        r = await later.exec(look, user="agent")
        assert secret not in r.stdout and name not in r.stdout, r.stdout
        await host_sb.stop()
        r = await later.exec(look, user="agent")
        assert secret not in r.stdout and name not in r.stdout, r.stdout
    finally:
        await later.stop()


async def test_harness_session_keyring_is_not_inherited(tmp_path: Path) -> None:
    """A harness in a session keyring of its own (as in a container) keeps its keys to itself,
    and sandbox processes cannot pass keys to each other through it."""
    keyctl = _keyctl()
    name, secret = f"am-ses-{secrets.token_hex(4)}", f"session-secret-{secrets.token_hex(8)}"
    child = tmp_path / "child.py"
    child.write_text(
        "import asyncio, subprocess, sys\n"
        "from agentmeter.sandbox.local import LocalBackend\n"
        "from agentmeter.sandbox.spec import SandboxSpec\n"
        f"subprocess.run(['{keyctl}', 'add', 'user', '{name}', '{secret}', '@s'], check=True,\n"
        "               capture_output=True)\n"
        "async def main():\n"
        "    sb = await LocalBackend().start(SandboxSpec(base='host'))\n"
        "    try:\n"
        "        for user in ('root', 'agent'):\n"
        f"            r = await sb.exec('keyctl search @s user {name} && keyctl pipe %{name}', user=user)\n"
        "            print(r.stdout)\n"
        "        await sb.exec('keyctl add user am-planted x @s', user='agent')\n"
        "        r = await sb.exec('keyctl search @s user am-planted', user='agent')\n"
        "        print('PLANTED' if r.exit_code == 0 else 'clean')\n"
        "    finally:\n"
        "        await sb.stop()\n"
        "asyncio.run(main())\n")
    src = str(Path(agentmeter.__file__).resolve().parent.parent)
    proc = await asyncio.create_subprocess_exec(
        keyctl, "session", "-", sys.executable, str(child), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": src})
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert secret not in out.decode() and "PLANTED" not in out.decode(), out.decode()


async def test_sandbox_ids_are_no_host_account(sb) -> None:  # type: ignore[no-untyped-def]
    """Files written by root and the agent, and the agent's running process, carry host ids
    that are neither root nor any account of this host."""
    await sb.exec("echo r > /workspace/by-root", user="root")
    await sb.exec("echo a > /workspace/by-agent", user="agent")
    marker = f"am-uid-{time.time_ns()}"
    running = asyncio.create_task(sb.exec(f"exec -a {marker} sleep 60", user="agent"))
    try:
        pid: list[int] = []

        def found() -> bool:
            pid[:] = [p for p in _pids() if marker.encode() in _cmdline(p)]
            return bool(pid)

        assert await eventually_async(found)
        status = Path(f"/proc/{pid[0]}/status").read_text()
        uids = {int(x) for line in status.splitlines() if line.startswith(("Uid:", "Gid:"))
                for x in line.split()[1:]}
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    for f in ("by-root", "by-agent"):
        st = os.lstat(sb.upper / "workspace" / f)
        uids |= {st.st_uid, st.st_gid}
    assert 0 not in uids
    host_ids = {p.pw_uid for p in pwd.getpwall()} | {p.pw_gid for p in pwd.getpwall()}
    assert not uids & host_ids, (uids, host_ids & uids)


async def test_root_cannot_modify_host_bind_mounts(local_backend: LocalBackend, tmp_path: Path) -> None:
    """A writable task mount and the ``host`` base's read-only system directories: root inside
    can neither write, chown nor chmod what the host owns."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "f").write_text("host data\n")
    os.chmod(shared, 0o755)
    box = await local_backend.start(SandboxSpec(
        base="host", mounts=(Mount(source=shared, target="/shared", read_only=False),)))
    try:
        r = await box.exec(
            "echo pwned > /shared/f && echo WROTE; touch /shared/new && echo CREATED; "
            "chown 0:0 /shared/f && echo CHOWNED; chmod 666 /shared/f && echo CHMODDED; "
            "rm -f /shared/f && echo REMOVED; "
            "mount -o remount,rw /usr && echo REMOUNTED; touch /usr/am-pwned && echo USR; "
            "chown 0 /etc/hostname && echo ETC; true", user="root")
        assert not set(r.stdout.split()) & {"WROTE", "CREATED", "CHOWNED", "CHMODDED", "REMOVED",
                                            "REMOUNTED", "USR", "ETC"}, r.stdout
        r = await box.exec("cat /shared/f", user="root")
        assert r.stdout == "host data\n"  # still readable: the mount works
    finally:
        await box.stop()
    st = os.stat(shared / "f")
    assert (shared / "f").read_text() == "host data\n" and (st.st_uid, st.st_mode & 0o777) == (0, 0o644)
    assert sorted(p.name for p in shared.iterdir()) == ["f"]
    assert not Path("/usr/am-pwned").exists()


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

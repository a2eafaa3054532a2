"""The exec without bwrap of root-run local sandboxes (zygote_direct.py): the command must see
exactly what the same exec through bwrap saw (field by field), and each defence the keeper's
children now make themselves is attacked: the mounts resolved inside the tree, the exec's init
holding nothing the command lacks, the init dying with its keeper."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from pathlib import Path

import pytest
from exec_kinds import ROOT_MASK

from agentmeter.sandbox import zygote
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerSpec, Mount, SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote serves root-run sandboxes")

#: what an exec's command sees of itself, one "name: value" per line
PROBE = r"""
grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs|Seccomp|Seccomp_filters|PPid|NSpid|SigBlk|SigIgn):' \
  /proc/self/status
echo "uid_map: $(cat /proc/self/uid_map | tr -s ' ')"
echo "gid_map: $(cat /proc/self/gid_map | tr -s ' ')"
echo "setgroups: $(cat /proc/self/setgroups)"
echo "hostname: $(hostname)"
echo "cwd: $(pwd)"
echo "umask: $(umask)"
echo "cgroup: $(cat /proc/self/cgroup | tr '\n' ' ')"
echo "limits: $(ulimit -a | tr -s ' ' | tr '\n' ';')"
for fd in /proc/$$/fd/*; do echo "fd ${fd##*/}: $(readlink "$fd" | sed 's/\[[0-9]*\]//')"; done
env | sort | grep -v '^_=' | sed 's/^/env: /'
tr '\0' '\n' < /proc/$$/environ | sort | sed 's/^/environ: /'
sed -E 's/^[0-9]+ [0-9]+ [0-9]+:[0-9]+ /mount: /' /proc/self/mountinfo
"""


def _fields(out: str) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for line in out.splitlines():
        name, _, value = line.partition(":")
        seen.setdefault(name, []).append(value.strip())
    return seen


@pytest.mark.parametrize("user", ["root", "agent"])
async def test_the_exec_without_bwrap_sees_what_bwraps_exec_saw(
        local_backend: LocalBackend, user: str) -> None:
    """The same probe through the exec without bwrap and through bwrap (the same sandbox, with
    bwrap's own /dev): every field equal (mounts and their flags, ids, maps, groups, capability
    sets, no_new_privs, the seccomp filter, signals, hostname, cwd, umask, cgroup, limits,
    descriptors, the environment), but the bounding set, which the exec without bwrap cuts to
    what the user keeps (bwrap left it full), and the ignored signals: none without bwrap,
    whatever the harness ignored through bwrap."""
    spec = SandboxSpec(mounts=(Mount(source=Path(__file__).parent, target="/task", read_only=True),),
                       env={"PROBE_VAR": "x y"})
    sb = await local_backend.start(spec)
    try:
        assert isinstance(sb._keeper, zygote.Keeper) and sb._keeper.dev
        direct = await sb.exec(PROBE, user=user, cwd="/tmp")
        sb._keeper.dev = False  # the bwrap command (with its own --dev)
        bwrap = await sb.exec(PROBE, user=user, cwd="/tmp")
    finally:
        await sb.stop()
    assert direct.exit_code == 0 and bwrap.exit_code == 0, (direct, bwrap)
    assert direct.stderr == bwrap.stderr == "", (direct.stderr, bwrap.stderr)
    ours, theirs = _fields(direct.stdout), _fields(bwrap.stdout)
    kept = ROOT_MASK if user == "root" else 0
    assert ours.pop("CapBnd") == [f"{kept:016x}"]
    assert int(theirs.pop("CapBnd")[0], 16) & kept == kept
    # no signal ignored: bwrap passed on what the harness ignored (HUP, INT and QUIT when it
    # runs under nohup in a background job, as CI runs it); the exec without bwrap does not
    assert ours.pop("SigIgn") == ["0000000000000000"]
    theirs.pop("SigIgn")
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert ours[name] == theirs[name], name
    assert "/task ro,nosuid,nodev" in " ".join(ours["mount"])
    assert ours["Seccomp"] == ["2"] and ours["NoNewPrivs"] == ["1"]


async def test_a_script_without_interpreter_line_runs_as_execvp_ran_it(
        local_backend: LocalBackend) -> None:
    """bwrap started the command with execvp, which runs a script without ``#!`` with
    /bin/sh; so must the exec without bwrap (glibc's posix_spawnp does not), by path and found
    in PATH; a missing command fails with the status it had (setpriv's 127 for the agent,
    bwrap's 1 for root)."""
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.exec("printf 'echo ran-as-sh $0 $1\\n' > /usr/local/bin/noshebang; "
                      "chmod 755 /usr/local/bin/noshebang", user="root")
        by_path = await sb.exec(["/usr/local/bin/noshebang", "arg"], user="agent")
        by_name = await sb.exec(["noshebang", "arg"], user="agent")
        missing = await sb.exec(["no-such-command"], user="agent")
        missing_root = await sb.exec(["no-such-command"], user="root")
    finally:
        await sb.stop()
    assert by_path.stdout == by_name.stdout == "ran-as-sh /usr/local/bin/noshebang arg\n", (
        by_path, by_name)
    assert missing.exit_code == 127 and "no-such-command" in missing.stderr, missing
    assert missing_root.exit_code == 1 and "no-such-command" in missing_root.stderr, missing_root


#: a host directory an image's symlink names, where no mount of the sandbox may land
TARGET = "/tmp/agentmeter-direct-symlink-target"


async def test_a_task_mount_under_an_image_symlink_lands_inside_the_tree(
        local_backend: LocalBackend, tmp_path: Path) -> None:
    """An image whose mount target's parent is a symlink to an absolute host path: the exec's
    init resolves the target inside the tree (openat2 RESOLVE_IN_ROOT), so the task's files
    are where the sandbox looks, and nothing is mounted on the host's path (there the mount
    would be out of the sandbox's sight, the image's own directory shown instead)."""
    host = Path(TARGET)
    shutil.rmtree(host, ignore_errors=True)
    (host / "data").mkdir(parents=True)
    (tmp_path / "marker").write_text("TASK")
    tmp_path.chmod(0o755)  # shown to the sandbox as nobody's
    (tmp_path / "marker").chmod(0o644)
    spec = SandboxSpec(layers=(LayerSpec(kind="script", network="none",
                                         source=f"mkdir -p {TARGET}/data && ln -s {TARGET} /mnt/link"),),
                       mounts=(Mount(source=tmp_path, target="/mnt/link/data", read_only=True),))
    try:
        sb = await local_backend.start(spec)
        try:
            r = await sb.exec(["cat", "/mnt/link/data/marker"], user="agent")
        finally:
            await sb.stop()
        assert r.stdout == "TASK", r
        assert not (host / "data" / "marker").exists()
    finally:
        shutil.rmtree(host, ignore_errors=True)


async def test_the_exec_s_init_holds_nothing_the_command_lacks(local_backend: LocalBackend) -> None:
    """The exec's init (PID 1 of its namespace) runs with the command's ids, capabilities,
    no_new_privs and seccomp filter, and holds no descriptor at all (none of the keeper's, its
    request's or the setup's; listed from the host: the init is not dumpable, so the command
    cannot list them, see test_sandbox_exec_direct_attacks.py)."""
    sb = await local_backend.start(SandboxSpec())
    try:
        assert isinstance(sb._keeper, zygote.Keeper)
        running = asyncio.ensure_future(sb.exec("exec sleep 30", user="root"))
        fds: list[str] = []
        for _ in range(500):  # the init closes the command's stdio once it has started it
            inits = [p for p in _children(sb._keeper.pid) if _read(f"/proc/{p}/comm") == b"agentmeter-init\n"
                     and _children(p)]
            if inits:
                fds = os.listdir(f"/proc/{inits[0]}/fd")
                if not fds:
                    break
            await asyncio.sleep(0.01)
        assert inits, "the exec never started"
        r = await sb.exec("grep -E '^(Uid|CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/1/status; "
                          "tr '\\0' ' ' < /proc/1/cmdline",
                          user="root")
        own = await sb.exec("grep -E '^(Uid|CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
                            user="root")
        running.cancel()
        with contextlib.suppress(BaseException):
            await running
    finally:
        await sb.stop()
    assert fds == []
    assert r.exit_code == 0, r
    lines = r.stdout.splitlines()
    assert lines[:6] == own.stdout.splitlines()
    assert lines[-1].startswith("agentmeter-init -- bash -c")


def _children(pid: int) -> list[int]:
    text = _read(f"/proc/{pid}/task/{pid}/children").decode()
    return [int(p) for p in text.split()]


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        chain.append(pid)
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return chain


async def test_the_exec_ends_with_its_keeper(local_backend: LocalBackend) -> None:
    """SIGKILL to the sandbox's keeper alone (not the exec's group): the exec's init, its
    child, dies with it (PR_SET_PDEATHSIG, armed again after each change of ids, which clears
    it), and with the init every process of the exec's PID namespace; the agent's and root's
    alike."""
    for user in ("agent", "root"):
        sb = await local_backend.start(SandboxSpec())
        marker = f"am-direct-{os.getpid()}-{id(sb)}-{user}"
        try:
            running = asyncio.ensure_future(sb.exec(f"exec -a {marker} sleep 60", user=user))
            found: list[int] = []
            for _ in range(500):
                found = [int(p) for p in os.listdir("/proc") if p.isdigit()
                         and _read(f"/proc/{p}/cmdline").startswith(marker.encode())]
                if found:
                    break
                await asyncio.sleep(0.01)
            assert found, "the exec never started"
            assert isinstance(sb._keeper, zygote.Keeper)
            chain = _ancestors(found[0])
            assert chain[2] == sb._keeper.pid  # command, init, keeper
            os.kill(sb._keeper.pid, signal.SIGKILL)
            for _ in range(500):
                if not Path(f"/proc/{found[0]}").exists():
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"the {user} exec's command survived its keeper")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, 10)
        finally:
            with contextlib.suppress(Exception):
                await sb.stop()


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""

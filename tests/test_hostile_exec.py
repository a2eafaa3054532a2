"""Attacks on the process an agent's command runs as, in a root-run local sandbox (local.py,
local_command.py): what each kind of exec is (credentials, filter, namespaces, environment,
descriptors, session), what it can see and reach of other processes (the keeper, concurrent
execs, other sandboxes, whatever runs as its init), and that every process it starts ends with
it. The mounts and devices it sees: tests/test_hostile_exec_mounts.py.

Expected today, and checked: each exec is its own PID, IPC and UTS namespace (bwrap's
``--unshare-*``), so concurrent execs of one sandbox do not see each other."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from exec_kinds import KINDS, ROOT_MASK, run_kind, status_fields
from polling import eventually_async
from proclife import identity, running

from agentmeter.sandbox.idmap import SHIFT_BASE, SHIFT_SIZE
from agentmeter.sandbox.local import LocalBackend, LocalSandbox
from agentmeter.sandbox.local_keeper import DEFAULT_PATH
from agentmeter.sandbox.spec import SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="attacks on a root-run harness")

#: every kind of exec, and a compose sidecar's as root and as the agent
ALL_KINDS = [*KINDS, "sidecar-root", "sidecar-agent"]
PRCTL = {"x86_64": 157, "aarch64": 167}.get(platform.machine(), 157)
PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
async def sb(local_backend: LocalBackend) -> AsyncIterator[LocalSandbox]:
    box = await local_backend.start(SandboxSpec())
    yield box
    await box.stop()


@contextlib.asynccontextmanager
async def _box_for(local_backend: LocalBackend, sb: LocalSandbox,
                   kind: str) -> AsyncIterator[tuple[LocalSandbox, str]]:
    """The sandbox to run ``kind`` in (a sidecar joined to ``sb``'s network for sidecar-*)."""
    if not kind.startswith("sidecar-"):
        yield sb, kind
        return
    side = await local_backend.start(SandboxSpec(join_network=sb.id))
    try:
        yield side, kind.removeprefix("sidecar-")
    finally:
        await side.stop()


def _host_pids_with(marker: str, *, named: bool = False) -> list[int]:
    """Host processes with ``marker`` in their command line (bwrap's holds the exec's script);
    ``named``: in their name (argv[0], as ``exec -a`` or perl's ``$0`` set it)."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                if marker.encode() in (cmd.split(b"\0")[0] if named else cmd):
                    found.append(int(p))
    return found


def _links(ls_output: str) -> dict[str, str]:
    """``ls -l`` of a directory of links as {name: target} (GNU and busybox ls)."""
    out = {}
    for line in ls_output.splitlines():
        m = re.search(r" (\S+) -> (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


# -- what an exec is ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ALL_KINDS)
async def test_every_exec_has_the_sandbox_credentials_filter_and_namespaces(
        local_backend: LocalBackend, sb: LocalSandbox, kind: str) -> None:
    """Root holds exactly ROOT_CAPS (in every set but the bounding one), the agent none; both
    run under no_new_privs and the seccomp filter, as the sandbox's shifted ids, in no
    namespace of the host's; the network namespace is the sandbox's own (a sidecar's: the
    sandbox it joined)."""
    async with _box_for(local_backend, sb, kind) as (box, k):
        st = status_fields(await run_kind(box, k, ["cat", "/proc/self/status"]))
        maps = [await run_kind(box, k, ["cat", f"/proc/self/{m}"]) for m in ("uid_map", "gid_map")]
        ns = _links(await run_kind(box, k, ["ls", "-l", "/proc/self/ns/"]))
    root = KINDS[k][0] == "root"
    ids = " ".join(["0" if root else "1000"] * 4)
    caps = f"{ROOT_MASK if root else 0:016x}"
    assert (st["Uid"], st["Gid"], st["Groups"]) == (ids, ids, ""), st
    assert {c: st[c] for c in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == dict.fromkeys(
        ("CapInh", "CapPrm", "CapEff", "CapAmb"), caps), st
    assert (st["NoNewPrivs"], st["Seccomp"]) == ("1", "2"), st
    for m in maps:
        assert m.split() == ["0", str(SHIFT_BASE), str(SHIFT_SIZE)], maps
    for name in ("mnt", "pid", "ipc", "uts", "user", "cgroup", "net"):
        assert ns[name] != os.readlink(f"/proc/self/ns/{name}"), (name, ns)
    assert sb._keeper is not None
    assert ns["net"] == os.readlink(f"/proc/{sb._keeper.pid}/ns/net")
    assert ns["pid"] != os.readlink(f"/proc/{sb._keeper.pid}/ns/pid")


async def test_the_environment_hostname_and_cwd_are_exactly_the_given_ones(
        local_backend: LocalBackend) -> None:
    """Nothing of the harness's environment (a planted secret) reaches any exec; the exec's
    environment is exactly the sandbox's, the spec's and the call's (and bwrap's PWD); root cannot rename the
    host (no CAP_SYS_ADMIN), and the name stays the spec's for later execs."""
    secret = f"am-exec-secret-{secrets.token_hex(8)}"
    os.environ["AGENTMETER_EXEC_SECRET"] = secret
    box = await local_backend.start(SandboxSpec(env={"SPEC_VAR": "spec"}, hostname="trial-host"))
    try:
        for user, name, home in (("root", "root", "/root"), ("agent", "agent", "/home/agent")):
            r = await box.exec(["env"], user=user, env={"EXTRA": "x y"})
            got = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert got == {"PATH": DEFAULT_PATH, "HOME": home, "USER": name, "LOGNAME": name,
                           "LANG": "C.UTF-8", "TERM": "dumb", "HOSTNAME": "trial-host",
                           "SPEC_VAR": "spec", "EXTRA": "x y", "PWD": box.workdir}, r.stdout
            r = await box.exec("hostname; cat /proc/sys/kernel/hostname; readlink /proc/self/cwd; "
                               "hostname evil 2>/dev/null && echo RENAMED; true", user=user, cwd="/tmp")
            assert r.stdout.split() == ["trial-host", "trial-host", "/tmp"], r.stdout
            r = await box.exec(["readlink", "/proc/self/cwd"], user=user)
            assert r.stdout.strip() == box.workdir
        out = await run_kind(box, "copyout-agent", ["env"])
        assert dict(line.split("=", 1) for line in out.splitlines()) == {
            "PATH": DEFAULT_PATH, "LC_ALL": "C", "PWD": "/"}, out
        r = await box.exec("cat /proc/[0-9]*/environ | tr '\\0' '\\n'", user="root")
        assert secret not in r.stdout and "AGENTMETER_EXEC_SECRET" not in r.stdout
    finally:
        del os.environ["AGENTMETER_EXEC_SECRET"]
        await box.stop()


@pytest.mark.parametrize("kind", ALL_KINDS)
async def test_an_exec_holds_only_its_stdin_stdout_and_stderr(
        local_backend: LocalBackend, sb: LocalSandbox, kind: str) -> None:
    """No descriptor of the keeper, an init, the harness or the seccomp program's pipe: 0 is
    /dev/null (or the exec's own stdin pipe), 1 and 2 its own two pipes."""
    async with _box_for(local_backend, sb, kind) as (box, k):
        fds = _links(await run_kind(box, k, ["ls", "-l", "/proc/self/fd/"]))
    fds = {n: t for n, t in fds.items() if not re.fullmatch(r"/proc/\d+/fd", t)}  # ls's own
    assert sorted(fds) == ["0", "1", "2"], fds
    stdin = KINDS[k][1] is not None
    assert fds["0"].startswith("pipe:") if stdin else fds["0"] == "/dev/null", fds
    assert fds["1"].startswith("pipe:") and fds["2"].startswith("pipe:") and fds["1"] != fds["2"]


#: every process an exec can see, but itself: its status, whether its root and cwd are the
#: exec's own tree (same inode as the path they name, seen from here), and its descriptors
SURVEY = r'''
my @top = stat("/");
opendir(my $own, "/proc/self/fd"); for (grep { /^\d+$/ } readdir($own)) {
  my $t = readlink("/proc/self/fd/$_"); print "SELF $_ $t\n" if defined $t; }
opendir(my $p, "/proc") or die;
for my $pid (sort { $a <=> $b } grep { /^\d+$/ } readdir($p)) {
  next if $pid == $$;
  open(my $f, "<", "/proc/$pid/status") or next;
  my %s = map { /^(\w+):\s*(.*?)\s*$/ ? ($1, $2) : () } <$f>;
  print "PID $pid $s{Seccomp} $s{NoNewPrivs} $s{CapPrm} $s{CapEff} $s{CapAmb}\n";
  my @r = stat("/proc/$pid/root/");
  print "ROOT $pid ", (!@r ? "unreadable" : "$r[0]:$r[1]" eq "$top[0]:$top[1]" ? "same" : "other"), "\n";
  my $cwd = readlink("/proc/$pid/cwd"); my @c = stat("/proc/$pid/cwd/"); my @named = stat($cwd // "");
  print "CWD $pid ", (!@c ? "unreadable"
    : @named && "$c[0]:$c[1]" eq "$named[0]:$named[1]" ? "same" : "other:$cwd"), "\n";
  if (opendir(my $d, "/proc/$pid/fd")) { for (grep { /^\d+$/ } readdir($d)) {
    my $t = readlink("/proc/$pid/fd/$_"); print "FD $pid $_ $t\n" if defined $t; } }
}
'''
#: descriptors a process an exec sees may hold besides the exec's own stdio (bwrap's init:
#: an eventfd)
HARMLESS_FDS = ("anon_inode:[eventfd]", "anon_inode:[signalfd]", "anon_inode:[timerfd]")


@pytest.mark.parametrize("user", ["root", "agent"])
async def test_every_process_an_exec_sees_is_as_confined_as_the_exec(sb: LocalSandbox,
                                                                     user: str) -> None:
    """What root could take over by ptrace or /proc (bwrap's init today; any in-sandbox init):
    every process it can see runs under the filter and no_new_privs, holds no capability
    beyond ROOT_CAPS, has the exec's root and a cwd inside it, and holds no socket, no pipe
    but the exec's own stdio and no file outside (the keeper's socket, the seccomp pipe)."""
    r = await sb.exec(["perl", "-e", SURVEY], user=user, stdin=b"")
    assert r.exit_code == 0, r
    own = {rest[1] for tag, *rest in map(str.split, r.stdout.splitlines())
           if tag == "SELF" and rest[0] in ("0", "1", "2")}  # its stdio (checked above)
    seen = 0
    for tag, pid, *rest in map(str.split, r.stdout.splitlines()):
        if tag == "PID":
            seen += 1
            seccomp, nnp, *caps = rest
            assert (seccomp, nnp) == ("2", "1"), (pid, rest)
            assert all(int(c, 16) & ~ROOT_MASK == 0 for c in caps), (pid, rest)
        elif tag in ("ROOT", "CWD"):
            assert rest[0] in ("same", "unreadable"), (tag, pid, rest)  # unreadable: unreachable
        elif tag == "FD":
            target = rest[1]
            assert target in own or target in HARMLESS_FDS, (pid, rest, r.stdout)
    assert seen >= 1  # at least the exec's init


async def test_an_exec_cannot_see_or_kill_the_keeper_concurrent_execs_or_other_sandboxes(
        local_backend: LocalBackend, sb: LocalSandbox) -> None:
    """A concurrent exec of the same sandbox and an exec of another sandbox run while root and
    the agent list every process they can see and SIGKILL every pid the host gives those
    victims, the keepers and the harness, then everything they can (kill -1)."""
    other = await local_backend.start(SandboxSpec())
    mark = f"am-victim-{secrets.token_hex(4)}"
    victims = [asyncio.ensure_future(sb.exec(f"exec -a {mark}-same sleep 120", user="agent")),
               asyncio.ensure_future(other.exec(f"exec -a {mark}-other sleep 120", user="agent"))]
    try:
        assert await eventually_async(lambda: len(_host_pids_with(mark, named=True)) == 2)
        alive = [identity(p) for p in _host_pids_with(mark, named=True)]
        assert sb._keeper is not None and other._keeper is not None
        keepers = [sb._keeper.pid, other._keeper.pid]
        victims_pids = _host_pids_with(mark, named=True)
        targets = " ".join(map(str, [*victims_pids, *keepers, os.getpid(), os.getppid()]))
        for user in ("agent", "root"):
            r = await sb.exec("for f in /proc/[0-9]*/cmdline; do "
                              "echo \"NAME:$(head -zn1 $f | tr -d '\\0')\"; "
                              f"done; for p in {targets}; do kill -KILL $p 2>/dev/null && echo KILLED:$p; "
                              "done; kill -KILL -1 2>/dev/null; true", user=user)
            names = [ln for ln in r.stdout.splitlines() if ln.startswith("NAME:")]
            assert len(names) >= 2 and not [n for n in names if mark in n or "python" in n], names
            assert not re.search(r"^KILLED:", r.stdout, re.M), r.stdout
        assert all(i is not None and running(*i) for i in alive), alive
        assert sb._keeper.poll() is None and other._keeper.poll() is None
        assert (await sb.exec(["true"])).exit_code == 0 and (await other.exec(["true"])).exit_code == 0
    finally:
        for v in victims:
            v.cancel()
        await asyncio.gather(*victims, return_exceptions=True)
        await other.stop()


#: every process an exec can see whose memory it can read (/proc/<pid>/mem: it may ptrace
#: it): "FOUND <pid>" when its writable memory holds the needle (its argument, reversed)
MEMORY_SCAN = r"""
my $needle = reverse $ARGV[0];  # given reversed: the exec's own argv holds it only so
opendir(my $p, "/proc") or die;
for my $pid (grep { /^\d+$/ && $_ != $$ } readdir($p)) {
  open(my $maps, "<", "/proc/$pid/maps") or next;
  open(my $mem, "<:raw", "/proc/$pid/mem") or next;
  print "READABLE $pid\n";
  while (<$maps>) {
    my ($a, $b, $perm) = /^([0-9a-f]+)-([0-9a-f]+) (\S+)/ or next;
    next unless $perm =~ /^rw/ && hex($b) - hex($a) < 256 << 20;
    defined(sysseek($mem, hex $a, 0)) or next;
    my $buf; sysread($mem, $buf, hex($b) - hex($a)) or next;
    if (index($buf, $needle) >= 0) { print "FOUND $pid\n"; last }
  }
}
"""


async def test_no_process_an_exec_can_read_holds_anything_of_another_sandbox(
        local_backend: LocalBackend) -> None:
    """Root may read the memory of the processes its exec sees that it may ptrace (bwrap's init
    today): none may hold another sandbox's data (its id, in its directories' names and its
    keeper's request), as a copy of a zygote's memory that served it would."""
    other = await local_backend.start(SandboxSpec())
    box = await local_backend.start(SandboxSpec())  # after the other's start passed the zygote
    try:
        r = await box.exec(["perl", "-e", MEMORY_SCAN, other.id[::-1]], user="root")
        assert r.exit_code == 0, r
        assert "FOUND" not in r.stdout, r.stdout
    finally:
        await box.stop()
        await other.stop()

# -- every process an exec started ends with it ---------------------------------------------

#: processes that try to outlive their exec: a double-forked one in a session of its own that
#: ignores SIGTERM/SIGHUP/SIGINT, a nohup loop, a child subreaper with an orphaned grandchild,
#: and a stopped one (none holds the exec's output: an exec that ends leaves them running only
#: if the kill of its PID namespace failed)
STUBBORN = ("( setsid bash -c 'trap \"\" TERM HUP INT; exec -a {m}-setsid sleep 300' >/dev/null 2>&1 & ); "
            "nohup bash -c 'trap \"\" TERM HUP; exec -a {m}-loop bash -c \"while :; do sleep 1; done\"' "
            ">/dev/null 2>&1 & "
            "perl -e '$0 = \"{m}-reaper\"; syscall(" + str(PRCTL) + ", " + str(PR_SET_CHILD_SUBREAPER)
            + ", 1, 0, 0, 0); if (!fork) {{ if (!fork) {{ $0 = \"{m}-orphan\"; sleep 300 }} exit 0 }} "
            "sleep 300' >/dev/null 2>&1 & "
            "bash -c 'exec -a {m}-stopped bash -c \"kill -STOP \\$\\$; sleep 300\"' >/dev/null 2>&1 & ")
STUBBORN_NAMES = ("setsid", "loop", "reaper", "orphan", "stopped")


@pytest.mark.parametrize("ending", ["exit", "timeout", "cancel"])
@pytest.mark.parametrize("user", ["agent", "root"])
async def test_every_process_an_exec_started_ends_with_it(sb: LocalSandbox, user: str,
                                                          ending: str) -> None:
    mark = f"am-stubborn-{secrets.token_hex(4)}"
    script = STUBBORN.format(m=mark) + ("echo started" if ending == "exit" else "sleep 300")
    task = asyncio.ensure_future(sb.exec(script, user=user, timeout=10 if ending == "timeout" else None))
    seen: set[str] = set()

    def all_started() -> bool:
        for p in _host_pids_with(mark, named=True):
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
                seen.update(n for n in STUBBORN_NAMES if name == f"{mark}-{n}".encode())
        return len(seen) == len(STUBBORN_NAMES) or task.done()

    try:
        assert await eventually_async(all_started, timeout=20)
        if ending == "cancel":
            task.cancel()
        r = await asyncio.gather(task, return_exceptions=True)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == set(STUBBORN_NAMES) or ending == "exit", (seen, r)
    if ending == "timeout":
        assert r[0].timed_out  # type: ignore[union-attr]
    assert await eventually_async(lambda: not _host_pids_with(mark)), _host_pids_with(mark)
    assert (await sb.exec(["true"], user=user)).exit_code == 0


async def test_killing_the_keeper_ends_every_process_of_its_execs(local_backend: LocalBackend) -> None:
    """Parent death: the keeper SIGKILLed from the host (the harness's crash ends it the same
    way) takes every process of its running execs with it, the detached ones too."""
    box = await local_backend.start(SandboxSpec())
    mark = f"am-orphaned-{secrets.token_hex(4)}"
    task = asyncio.ensure_future(box.exec(
        f"( setsid bash -c 'trap \"\" TERM HUP; exec -a {mark}-d sleep 300' >/dev/null 2>&1 & ); "
        f"exec -a {mark}-fg sleep 300", user="agent"))
    try:
        assert await eventually_async(lambda: len(_host_pids_with(mark, named=True)) == 2)
        assert box._keeper is not None
        os.kill(box._keeper.pid, signal.SIGKILL)
        assert await eventually_async(lambda: not _host_pids_with(mark)), _host_pids_with(mark)
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await box.stop()


#: the exec's terminal (stat's tty_nr), /dev/tty, and TIOCSTI on each of its descriptors
TTY_PROBE = r'''
open(my $st, "<", "/proc/self/stat"); my $s = <$st>; $s =~ s/^.*\) //; my @f = split / /, $s;
print "TTYNR $f[4]\n";
print open(my $t, "+<", "/dev/tty") ? "OPENED-TTY\n" : "NO-TTY\n";
for my $fd (0 .. 2) { open(my $h, "+<&=", $fd) or next; print "INJECTED:$fd\n" if ioctl($h, 0x5412, "x"); }
'''


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_an_exec_is_a_session_of_its_own_without_a_terminal(sb: LocalSandbox, user: str) -> None:
    """TIOCSTI into the harness's terminal needs one: an exec has no controlling terminal and
    none of its descriptors is one; it leads a session and process group that are neither the
    harness's nor the keeper's, so a killpg of the harness's group does not reach it and it
    cannot reach the harness's."""
    r = await sb.exec(["perl", "-e", TTY_PROBE], user=user)
    assert r.stdout.split() == ["TTYNR", "0", "NO-TTY"], r
    mark = f"am-session-{secrets.token_hex(4)}"
    task = asyncio.ensure_future(sb.exec(f"exec -a {mark} sleep 60", user=user))
    try:
        assert await eventually_async(lambda: bool(_host_pids_with(mark, named=True)))
        pid = _host_pids_with(mark, named=True)[0]
        assert sb._keeper is not None
        ours = {os.getsid(0), os.getpgid(0), os.getsid(sb._keeper.pid), os.getpgid(sb._keeper.pid)}
        assert os.getsid(pid) not in ours and os.getpgid(pid) not in ours
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
        assert stat[4] == "0"  # tty_nr
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

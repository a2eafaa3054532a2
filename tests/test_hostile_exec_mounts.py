"""Attacks on what an exec of a root-run local sandbox sees of the filesystem (local_command.py,
masks.py): its mounts (only the tree, /dev, /proc and its masks, and what the spec binds),
the /proc masks against a root that tries to lift them, chroot and pivot_root escapes, the
devices it has, and Unix sockets it could reach by name. What an exec is and what it can reach
of other processes: tests/test_hostile_exec.py."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from exec_kinds import KINDS, run_kind

from agentmeter.sandbox.copyout import BUSYBOX
from agentmeter.sandbox.local import LocalBackend, LocalSandbox
from agentmeter.sandbox.local_command import HELPER_DIR
from agentmeter.sandbox.masks import PROC_MASKED, PROC_READ_ONLY
from agentmeter.sandbox.seccomp import X86_64
from agentmeter.sandbox.spec import Mount, SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="attacks on a root-run harness")

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
#: what /dev holds in every exec (bwrap's --dev, or the keeper's copy of it)
DEV_NAMES = {*DEV_NODES, "core", "fd", "ptmx", "pts", "shm", "stderr", "stdin", "stdout"}
PROC_RO = [f"/proc/{n}" for n in PROC_READ_ONLY if os.path.exists(f"/proc/{n}")]
PROC_HIDDEN = [f"/proc/{n}" for n in PROC_MASKED if os.path.exists(f"/proc/{n}")]


@pytest.fixture
async def sb(local_backend: LocalBackend, tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    """A sandbox with a read-only directory and a writable file bound from the host."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("host file\n")
    box = await local_backend.start(SandboxSpec(mounts=(
        Mount(source=tmp_path / "dir", target="/data-ro"),
        Mount(source=tmp_path / "file", target="/data-rw", read_only=False))))
    yield box
    await box.stop()


def _mounts(mountinfo: str) -> dict[str, list[str]]:
    """{mount point: [its own options, fs type]}"""
    out = {}
    for line in mountinfo.splitlines():
        f = line.split()
        out[f[4]] = [f[5], f[f.index("-") + 1]]
    return out


@pytest.mark.parametrize("kind", list(KINDS))
async def test_an_exec_sees_only_its_tree_dev_proc_and_the_spec_binds(sb: LocalSandbox,
                                                                      kind: str) -> None:
    """No mount of the host (the keeper's stage, the layers, /run, /root...) beyond what the
    spec binds; every Docker read-only proc path read-only and every masked one hidden behind
    /dev/null or a read-only tmpfs, in every kind of exec (a copy out's included)."""
    m = _mounts(await run_kind(sb, kind, ["cat", "/proc/self/mountinfo"]))
    user, _, busybox = KINDS[kind]
    allowed = {"/", "/dev", "/dev/pts", "/proc", "/data-ro", "/data-rw",
               *(f"/dev/{n}" for n in DEV_NODES), *PROC_RO, *PROC_HIDDEN}
    if busybox:
        allowed.add(BUSYBOX)
    helpers = {p for p in m if p.startswith(f"{HELPER_DIR}/")}  # the host's setpriv, for the agent
    assert set(m) - helpers == allowed, set(m) ^ allowed
    assert not helpers or (user == "agent" and all(m[p][0].startswith("ro,") for p in helpers)), helpers
    assert m["/"][1] == "overlay" and m["/proc"][1] == "proc"
    for p in (*PROC_RO, *PROC_HIDDEN, "/data-ro"):
        assert m[p][0].split(",")[0] == "ro", (p, m[p])
    for p in PROC_HIDDEN:
        assert m[p][1] in ("tmpfs", "devtmpfs"), (p, m[p])  # an empty tmpfs, or /dev/null
    for p in ("/", "/dev", "/proc", "/data-ro", "/data-rw"):
        assert {"nosuid", "nodev"} <= set(m[p][0].split(",")), (p, m[p])


#: root tries to lift each mask: umount (plain and lazy), a bind remount read-write, and a
#: fresh proc, sysfs or bind of /proc where no mask is; each result printed (return, errno)
LIFT = r'''
my ($UMOUNT2, $MOUNT) = (@ARGV[0, 1]); my @paths = @ARGV[2 .. $#ARGV];
sub try { my ($what, @a) = @_; $! = 0; my $r = syscall(@a); print "$what $r ", $!+0, "\n"; }
for my $p (@paths) {
  try("umount $p", $UMOUNT2, $p, 0);
  try("lazy-umount $p", $UMOUNT2, $p, 2);
  try("remount-rw $p", $MOUNT, 0, $p, 0, 0x20 | 0x1000, 0);  # MS_REMOUNT | MS_BIND
}
mkdir("/tmp/am-$_") for qw(proc sys bind);
try("mount-proc", $MOUNT, "proc", "/tmp/am-proc", "proc", 0, 0);
try("mount-sysfs", $MOUNT, "sysfs", "/tmp/am-sys", "sysfs", 0, 0);
try("bind-proc", $MOUNT, "/proc", "/tmp/am-bind", 0, 0x1000 | 0x4000, 0);  # MS_BIND | MS_REC
'''


async def test_root_cannot_lift_the_proc_masks(sb: LocalSandbox) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers for x86_64")
    before = await sb.exec(["cat", "/proc/self/mountinfo"], user="root")
    r = await sb.exec(["perl", "-e", LIFT, str(X86_64["umount2"]), str(X86_64["mount"]),
                       *PROC_RO, *PROC_HIDDEN], user="root")
    results = [line.rsplit(" ", 2) for line in r.stdout.splitlines()]
    assert len(results) == 3 * len(PROC_RO + PROC_HIDDEN) + 3, r
    assert [w for w, ret, _ in results if ret != "-1"] == [], r.stdout
    after = await sb.exec("cat /proc/self/mountinfo; head -c 4096 /proc/kcore /proc/keys | wc -c; "
                          "cat /tmp/am-proc/version /tmp/am-sys/kernel/uevent_seqnum "
                          "/tmp/am-bind/version 2>/dev/null | wc -c; "
                          "(exec 3>>/proc/sysrq-trigger) 2>/dev/null && echo OPENED", user="root")
    lines = after.stdout.splitlines()
    assert _mounts("\n".join(lines[:-2])).keys() == _mounts(before.stdout).keys()
    assert lines[-2:] == ["0", "0"], lines[-2:]  # masked, no fresh proc or sysfs, not "OPENED"


#: chroot escapes (a chroot below the cwd, then .. past it) and pivot_root, then whether the
#: host's files are reachable
ESCAPE = r'''
my ($PIVOT, @host) = @ARGV;
mkdir "/tmp/am-jail";  # the cwd stays outside it: the classic escape
print "CHROOT ", (chroot("/tmp/am-jail") ? "ok" : "failed"), "\n";
chdir ".." for 1 .. 64; chroot(".");
my ($new, $old) = ("/", "/tmp"); $! = 0; my $r = syscall($PIVOT, $new, $old); print "PIVOT $r ", $!+0, "\n";
for my $h (@host) { print "HOST $h\n" if -e $h; }
print "INSIDE\n" if -d "/workspace";
'''


async def test_chroot_and_pivot_root_escapes_stay_in_the_tree(sb: LocalSandbox) -> None:
    """Root may chroot (CAP_SYS_CHROOT, as in Docker); ``..`` past the chroot reaches only the
    sandbox's own root, never the host's (this file, the keeper's stage, /work); pivot_root
    is refused."""
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers for x86_64")
    host = [str(Path(__file__).resolve()), "/run/agentmeter-stage/root/workspace",
            "/root/.cache/agentmeter"]
    r = await sb.exec(["perl", "-e", ESCAPE, str(X86_64["pivot_root"]), *host], user="root")
    assert r.stdout.splitlines() == ["CHROOT ok", "PIVOT -1 1", "INSIDE"], r


@pytest.mark.parametrize("kind", ["root", "agent", "copyout-agent"])
async def test_dev_holds_only_the_prepared_nodes(sb: LocalSandbox, kind: str) -> None:
    """No /dev/mem, /dev/kmsg, disks or the host's other devices; a copy out also has the
    host's busybox, an agent exec perhaps the host's setpriv."""
    names = set((await run_kind(sb, kind, ["ls", "-A", "/dev"])).split())
    extra = {BUSYBOX.removeprefix("/dev/")} if KINDS[kind][2] else set()
    assert names - {HELPER_DIR.removeprefix("/dev/")} == DEV_NAMES | extra, names


async def test_root_cannot_make_device_nodes(sb: LocalSandbox) -> None:
    """No CAP_MKNOD: root cannot make /dev/mem or a disk's node anywhere (and the tree is
    nodev besides)."""
    r = await sb.exec("for p in /dev/mem /tmp/mem /workspace/sda; do mknod $p c 1 1 2>/dev/null "
                      "&& echo MADE:$p; done; mknod /tmp/sda b 8 0 2>/dev/null && echo MADE:sda; "
                      "head -c 1 /dev/mem 2>/dev/null && echo READ; true", user="root")
    assert r.stdout == "", r


async def test_no_unix_socket_is_reachable_by_name(sb: LocalSandbox) -> None:
    """The keeper's, a fork server's or an init's socket is never bound to a path in the tree nor
    to an abstract name in the sandbox's network namespace (/proc/net/unix lists every socket
    of that namespace, the keeper's too): nothing to connect to."""
    r = await sb.exec("find / /dev /tmp /run -path /proc -prune -o -type s -print 2>/dev/null; "
                      "tail -n +2 /proc/net/unix", user="root")
    named = [ln for ln in r.stdout.splitlines() if not ln.split(":", 1)[0].isalnum() or
             len(ln.split()) > 7]
    assert named == [], r.stdout

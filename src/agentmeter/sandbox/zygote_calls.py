"""The zygote's system calls (standard library only; see zygote_server.py): mounts, namespaces,
loopback, the sandbox's /dev and paths, and an exec's child's entry into its sandbox."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_NOEXEC = 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
#: the per-mount flags bwrap's bind_mount keeps (and ORs MS_NOSUID into)
MOUNT_FLAGS = 1 | 2 | 4 | 8 | 1024 | 2048 | 4096  # rdonly nosuid nodev noexec noatime nodiratime relatime
#: bwrap's --dev: these host device nodes, bound on files in a fresh tmpfs
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
KEYCTL_JOIN_SESSION_KEYRING = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

_libc = ctypes.CDLL(None, use_errno=True)


def check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    check(_libc.mount(None if source is None else source.encode(), target.encode(),
                      None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
                      None if data is None else data.encode()), f"mount {target}")


def unshare(flags: int) -> None:
    check(_libc.unshare(flags), "unshare")


def setns(fd: int, kind: int) -> None:
    check(_libc.setns(fd, kind), "setns")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def fork_paired() -> tuple[int, socket.socket] | None:
    """Fork with a fresh socket pair, each side keeping its own end: (the child's pid, the
    parent's end) in the parent, (0, the child's end) in the child. None, nothing left open,
    when the fork fails (EAGAIN at a pids limit, ENOMEM)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            ours.close()
        except BaseException:  # noqa: BLE001 - a child never returns into its parent's code
            os._exit(1)
        return 0, theirs
    theirs.close()
    return pid, ours


def kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)


def namespaces(join_netns: str | None) -> None:
    """A keeper's mount and network namespaces (or the mount namespace in ``join_netns``'s
    network namespace): mounts private, loopback up, low ports allowed."""
    if join_netns:
        fd = os.open(join_netns, os.O_RDONLY)
        setns(fd, CLONE_NEWNET)
        os.close(fd)
        unshare(CLONE_NEWNS)
    else:
        unshare(CLONE_NEWNS | CLONE_NEWNET)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    loopback_up()
    # the network namespace is host root's: let the sandbox bind ports < 1024, as Docker does
    with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", "w") as f:
        f.write("0")


def join_session(cgroup: list[str], keyring: bool, keyctl_nr: int | None) -> None:
    """An exec's first process, as host root: a session it leads (killing the group kills the
    exec), the sandbox's cgroup and a fresh anonymous session keyring (keyctl session -)."""
    os.setsid()
    for f in cgroup:
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    if keyring:
        if keyctl_nr is None:
            raise OSError("keyctl join: no system call number for this machine")
        check(_libc.syscall(ctypes.c_long(keyctl_nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING),
                            None), "keyctl join")


def enter_exec(cgroup: list[str], keyring: bool, keyctl_nr: int | None, userns: int,
               mntns: int) -> None:
    """An exec's first process, before its request: the chain keyctl session -> cgroup ->
    nsenter of before, in one process."""
    join_session(cgroup, keyring, keyctl_nr)
    setns(userns, CLONE_NEWUSER)  # uid 0 there is host SHIFT_BASE
    if mntns >= 0:  # the sandbox's, with its /dev (a copy of the keeper's mounts)
        setns(mntns, CLONE_NEWNS)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.chdir("/")


def bind(source: str, target: str, flags: int) -> None:
    """bwrap's bind_mount: a recursive bind, then ``flags`` ORed into the mount's own flags."""
    mount(source, target, None, MS_BIND | MS_REC)
    current = os.statvfs(target).f_flag & MOUNT_FLAGS
    if current | flags != current:
        mount(None, target, None, MS_BIND | MS_REMOUNT | current | flags)


def make_paths(tree: str, dirs: list[str], files: list[str]) -> None:
    """``mkdir -p`` each of ``dirs`` and create each of ``files`` (empty, if missing) inside
    ``tree``, chrooted into it (every symlink of the image resolves inside), as the sandbox's
    uid 0: a start's workdir and mount targets, without a bwrap. No sandbox code has run yet."""
    os.chroot(tree)
    os.chdir("/")
    for path in dirs:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise OSError(f"mkdir {path}: {e.strerror}") from None
    for path in files:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        except OSError as e:
            raise OSError(f"create {path}: {e.strerror}") from None


def make_dev(dest: str) -> None:
    """What bwrap's ``--dev DEST`` makes (bubblewrap.c, SETUP_MOUNT_DEV), step by step, as the
    sandbox's uid 0 in a mount namespace its user namespace owns: the same tmpfs, device nodes,
    links, shm and devpts, with the same flags and owners. Each exec binds it (``--dev-bind``,
    which adds no flag a mount here lacks) instead of making its own."""
    mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name in DEV_NODES:
        node = f"{dest}/{name}"
        os.close(os.open(node, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        bind(f"/dev/{name}", node, MS_NOSUID)  # devices: no MS_NODEV
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dest}/{name}")
    os.symlink("/proc/self/fd", f"{dest}/fd")
    os.symlink("/proc/kcore", f"{dest}/core")
    os.mkdir(f"{dest}/shm", 0o755)
    os.mkdir(f"{dest}/pts", 0o755)
    mount("devpts", f"{dest}/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=620")
    os.symlink("pts/ptmx", f"{dest}/ptmx")

"""The zygote of root-run local sandboxes: the process side (standard library only; run as a
script, ``python -I -S zygote_server.py FD``, by zygote.py). See zygote.py for the design.

Two roles, one file:

- the *fork server* (one per harness process, host root in the host's namespaces): reads start
  requests on its socket (the fd its argument names), each with the keeper's end of a fresh
  socket pair, and forks a keeper for each; children are reaped by the kernel (SIGCHLD
  ignored). It exits when the harness's end closes.
- a *keeper* (one per sandbox): makes its mount and network namespaces (or joins a network
  namespace), mounts the sandbox tree, brings loopback up, makes the sandbox's user namespace
  and writes its id map, all by system calls (no program run); the id map's child, the
  sandbox's uid 0, makes the sandbox's mount namespace, prepares /dev in it and makes the
  start's workdir and mount targets. A keeper forked ahead has made its namespaces, that
  child with its user namespace (the id map of the starts before, the same for every
  sandbox) and the first exec's child (which gets its cgroup and the namespaces at the setup)
  before its request; else the first exec's child is forked while that child works. Then
  the keeper says ``ready`` and serves exec
  requests: while idle it forks the next exec's child, which joins the sandbox's cgroup, a
  fresh session keyring, the user namespace (uid 0 there) and the sandbox's mount namespace
  and waits; a request goes to it
  (or to a child forked then), which takes the request's stdin/stdout/stderr and seccomp
  program, closes every other descriptor and execs bwrap with the request's arguments. Exit
  statuses go back on the socket. When the socket closes or is shut (stop, or the harness
  died) it kills and reaps what it started and exits, which ends the mount namespaces.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import struct
import sys
from typing import Any

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
#: where the exec's seccomp program is (bwrap --seccomp 3)
SECCOMP_FD = 3
MAX_FDS = 8

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _check(_libc.mount(None if source is None else source.encode(), target.encode(),
                       None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
                       None if data is None else data.encode()), f"mount {target}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _setns(fd: int, kind: int) -> None:
    _check(_libc.setns(fd, kind), "setns")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the harness is gone: the socket's EOF ends this keeper
        sock.sendall(json.dumps(msg).encode() + b"\n")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _frame(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg).encode()
    return struct.pack("!I", len(data)) + data


def _recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One request: a 4-byte length, then that much JSON; descriptors ride on its first bytes.
    None at EOF."""
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(4, socket.CMSG_SPACE(MAX_FDS * fds.itemsize),
                                  socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not msg:
        for fd in fds:
            os.close(fd)
        return None
    rest = _recv_exact(sock, 4 - len(msg)) if len(msg) < 4 else b""
    body = None if rest is None else _recv_exact(sock, struct.unpack("!I", msg + rest)[0])
    if body is None:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(body), list(fds)


# -- keeper ---------------------------------------------------------------------------------


class Keeper:
    def __init__(self, sock: socket.socket, req: dict[str, Any]) -> None:
        self.sock = sock
        self.req = req
        self.userns = -1
        #: the sandbox's mount namespace (owned by its user namespace) with /dev prepared at
        #: req["dev"], which each exec's bwrap binds (--dev-bind); -1: none (bwrap's --dev)
        self.mntns = -1
        self.children: dict[int, int] = {}  # pid -> request id
        self.pidfds: dict[int, int] = {}  # pidfd -> pid
        #: the next exec's child, forked ahead (pid, its socket)
        self.spare: tuple[int, socket.socket] | None = None
        #: the user namespace's child made ahead (by a keeper forked ahead), if any
        self.prepared: UsernsChild | None = None
        #: the first exec's child forked ahead (by a keeper forked ahead), if any
        self.prepared_exec: tuple[int, socket.socket] | None = None
        #: the user namespace's child of the setup, until reaped
        self.setup_child = -1

    def setup(self, namespaces_made: bool = False) -> None:
        """The keeper script of local_keeper.py, as system calls (``namespaces_made``: by a
        keeper forked ahead, :func:`_namespaces`)."""
        r = self.req
        if not namespaces_made:
            _namespaces(r.get("join_netns"))
        os.chdir(r["layers"])  # lowerdir holds paths relative to it (mount options are short)
        rw = r["rw"]
        if r["disk_mb"]:
            _mount("tmpfs", rw, "tmpfs", 0, f"size={r['disk_mb']}m,mode=0755")
            for d in ("upper", "work"):
                os.mkdir(f"{rw}/{d}")
            os.chown(f"{rw}/upper", r["owner"], r["owner"])
        tree = r["tree"]
        _mount("overlay", tree, "overlay", 0, r["overlay_opts"])
        for d in r["host_dirs"]:
            _mount(d, tree + d, None, MS_BIND | MS_REC)
            _mount(None, tree + d, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NODEV | MS_NOSUID)
        for src, dst in r["binds"]:
            _mount(src, dst, None, MS_BIND | MS_REC)
        self.userns, self.mntns = self._make_userns(r["id_map"], r.get("dev"), r.get("mkdir"))

    def _make_userns(self, id_map: str, dev: str | None,
                     mkdir: dict[str, Any] | None = None) -> tuple[int, int]:
        """A fresh user namespace with ``id_map`` (made by a short-lived child; held by fd):
        the one :func:`_keeper_ahead` prepared (``prepared``) when its id map is this one,
        else made now (:func:`_userns_child`). With ``dev``, also the sandbox's mount
        namespace, owned by that user namespace, in which the child (the sandbox's uid 0)
        prepared /dev at ``dev`` (:func:`_make_dev`), then, chrooted into the sandbox tree,
        made ``mkdir``'s directories and files (:func:`_make_paths`: the start's workdir and
        mount targets). The child's exit is not waited for: it is reaped off the start's path
        (:meth:`_reap_setup_child`)."""
        child = self.prepared if self.prepared is not None and self.prepared.id_map == id_map else None
        if child is None:
            self._drop_prepared()
            child = _userns_child(id_map)
        self.prepared = None
        self.setup_child = child.pid
        early, self.prepared_exec = self.prepared_exec, None
        try:
            if not dev:
                return os.dup(child.userns), -1
            os.write(child.hold_w, json.dumps({"dev": dev, "mkdir": mkdir}).encode() + b"\n")
            if early is None:  # the first exec's child, forked while that child works
                early = _first_exec_child((child.ready_r, child.hold_w, self.sock.fileno()))
            said = os.read(child.ready_r, 512)
            if said != b"m":
                raise OSError(said[1:].decode(errors="replace") or "the user namespace's child failed")
            mntns = os.open(f"/proc/{child.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            userns = os.dup(child.userns)
            if early is not None:
                enter = {"cgroup": self.req["cgroup"], "keyring": self.req["keyring"],
                         "keyctl_nr": self.req.get("keyctl_nr")}
                try:
                    socket.send_fds(early[1], [_frame(enter)], [userns, mntns])
                except OSError:
                    self._drop(early)
                    early = None
                self.spare, early = early, None
            return userns, mntns
        finally:
            if early is not None:  # the setup failed
                self._drop(early)
            child.close()  # the child exits at its pipe's end

    @staticmethod
    def _drop(spare: tuple[int, socket.socket]) -> None:
        """A child forked ahead, not to be used: killed and reaped."""
        pid, line = spare
        line.close()
        _kill_group(pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    def _drop_prepared(self) -> None:
        """The user namespace's child prepared ahead, not used: it exits at its pipe's end."""
        if self.prepared is not None:
            self.prepared.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.prepared.pid, 0)
            self.prepared = None
        if self.prepared_exec is not None:
            self._drop(self.prepared_exec)
            self.prepared_exec = None

    def _reap_setup_child(self, block: bool = False) -> None:
        """Reap the user namespace's child once it has exited (it does once the setup is done)."""
        if self.setup_child > 0:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self.setup_child, 0 if block else os.WNOHANG)[0] == 0:
                    return
            self.setup_child = -1

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        prefork = True  # False after a failed fork: not again before something happens
        while True:
            self._reap_setup_child()
            # the next exec's child, forked while nothing waits (off the exec's path)
            events = sel.select(0 if self.spare is None and prefork else None)
            if not events and self.spare is None and prefork:
                self.spare = self._prefork()
                # fork failing (EAGAIN at a pids limit, ENOMEM) would otherwise be retried at
                # once, forever: a keeper spinning at 100% CPU while the machine is full
                prefork = self.spare is not None
                continue
            prefork = True  # a request or an exec's end: try again after it
            for key, _ in events:
                if key.fileobj is self.sock:
                    got = _recv_request(self.sock)
                    if got is None:
                        self._end()
                        return
                    req, fds = got
                    try:
                        self._handle(req, fds, sel)
                    finally:
                        for fd in fds:
                            os.close(fd)
                else:
                    assert isinstance(key.fileobj, int)
                    self._reap(key.fileobj, sel)

    def _handle(self, req: dict[str, Any], fds: list[int], sel: selectors.BaseSelector) -> None:
        if req["op"] == "kill":
            for pid, rid in self.children.items():
                if rid == req["id"]:
                    _kill_group(pid)
            return
        pid = -1
        if (self.spare is not None and req["cgroup"] == self.req["cgroup"]
                and req["keyring"] == self.req["keyring"]):
            pid, line = self.spare
            self.spare = None
            try:
                socket.send_fds(line, [_frame(req)], fds)
            except OSError:
                _kill_group(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                pid = -1
            finally:
                line.close()
        if pid < 0:
            try:
                pid = os.fork()
            except OSError as e:
                _send(self.sock, {"id": req["id"], "error": f"fork: {e.strerror}"})
                return
            if pid == 0:
                code = 127
                with contextlib.suppress(BaseException):
                    self._enter(req["cgroup"], req["keyring"])
                    code = self._run(req, fds)  # never returns but on failure
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = req["id"]
        self.pidfds[pidfd] = pid
        sel.register(pidfd, selectors.EVENT_READ)

    def _prefork(self) -> tuple[int, socket.socket] | None:
        """A child that has already joined the cgroup, a fresh session keyring and the user
        namespace, waiting on its own socket pair for the one exec it will become."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            code = 127
            with contextlib.suppress(BaseException):
                ours.close()
                self.sock.close()  # its keeper's socket: only the keeper answers the harness
                self._enter(self.req["cgroup"], self.req["keyring"])
                got = _recv_request(theirs)
                if got is None:  # the keeper ended
                    os._exit(0)
                theirs.close()
                code = self._run(*got)
            os._exit(code)
        theirs.close()
        return pid, ours

    def _enter(self, cgroup: list[str], keyring: bool) -> None:
        """An exec's first process, before its request (:func:`_enter_exec`)."""
        _enter_exec(cgroup, keyring, self.req.get("keyctl_nr"), self.userns, self.mntns)

    @staticmethod
    def _run(req: dict[str, Any], fds: list[int]) -> int:
        """The request's descriptors as 0-3, nothing else, then bwrap; returns only on failure."""
        try:
            stdio = fds[:3]
            sfd = fds[3] if len(fds) > 3 else -1
            # move them above the targets first, so no dup2 overwrites one not yet placed
            moved = [os.dup(fd) for fd in (*stdio, *([sfd] if sfd >= 0 else []))]
            for target, fd in enumerate(moved):
                os.dup2(fd, target, inheritable=True)
            os.closerange(len(moved), 1 << 20)  # nothing of the keeper's: no socket to it
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.execve(req["argv"][0], req["argv"], req["env"])
        except BaseException as e:  # noqa: BLE001 - said on the exec's stderr
            with contextlib.suppress(OSError):
                os.write(2, f"agentmeter sandbox exec: {e}\n".encode())
        return 127

    def _reap(self, pidfd: int, sel: selectors.BaseSelector) -> None:
        pid = self.pidfds.pop(pidfd)
        sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        rid = self.children.pop(pid)
        _send(self.sock, {"id": rid, "exit": os.waitstatus_to_exitcode(status)})

    def _end(self) -> None:
        """SIGKILL everything it started, say ``ended`` (nothing of the sandbox runs another
        instruction: a SIGKILLed process never returns to user space), then reap it all."""
        started = list(self.children)
        if self.spare is not None:
            pid, line = self.spare
            line.close()  # it exits
            started.append(pid)
        for pid in started:
            _kill_group(pid)
        _send(self.sock, {"id": -1, "ended": True})
        for pid in started:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self._reap_setup_child(block=True)


def _enter_exec(cgroup: list[str], keyring: bool, keyctl_nr: int | None, userns: int,
                mntns: int) -> None:
    """An exec's first process, before its request: the chain keyctl session -> cgroup ->
    nsenter of before, in one process."""
    os.setsid()  # bwrap leads its session: killing the group kills the exec
    for f in cgroup:  # as host root, before the user namespace
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    if keyring:  # a fresh anonymous session keyring (keyctl session -)
        if keyctl_nr is None:
            raise OSError("keyctl join: no system call number for this machine")
        _check(_libc.syscall(ctypes.c_long(keyctl_nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING),
                             None), "keyctl join")
    _setns(userns, CLONE_NEWUSER)  # uid 0 there is host SHIFT_BASE
    if mntns >= 0:  # the sandbox's, with its /dev (a copy of the keeper's mounts)
        _setns(mntns, CLONE_NEWNS)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.chdir("/")


def _first_exec_child(close: tuple[int, ...]) -> tuple[int, socket.socket] | None:
    """A sandbox's first exec's child, forked before the sandbox's namespaces exist (by a
    keeper forked ahead, before its request, or during the setup): it closes ``close`` (its
    keeper's descriptors), waits on its own socket pair for ``{"cgroup", "keyring",
    "keyctl_nr"}`` with the user and mount namespaces' descriptors, enters as every exec's
    child does (:func:`_enter_exec`), then waits there for the one exec it will become. It
    exits when the socket ends first. None when the fork fails."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        code = 127
        with contextlib.suppress(BaseException):
            ours.close()
            for fd in close:
                os.close(fd)
            got = _recv_request(theirs)
            if got is None or len(got[1]) != 2:  # the setup failed, or the keeper ended
                os._exit(0)
            what, (userns, mntns) = got
            _enter_exec(what["cgroup"], what["keyring"], what["keyctl_nr"], userns, mntns)
            got = _recv_request(theirs)
            if got is None:  # the keeper ended
                os._exit(0)
            theirs.close()
            code = Keeper._run(*got)
        os._exit(code)
    theirs.close()
    return pid, ours


class UsernsChild:
    """A child in a fresh user namespace whose id map is written (:func:`_userns_child`),
    waiting on ``hold_w`` for what to make in the sandbox's mount namespace."""

    def __init__(self, pid: int, id_map: str, ready_r: int, hold_w: int, userns: int) -> None:
        self.pid = pid
        self.id_map = id_map
        self.ready_r = ready_r
        self.hold_w = hold_w
        self.userns = userns

    def close(self) -> None:
        for fd in (self.ready_r, self.hold_w, self.userns):
            with contextlib.suppress(OSError):
                os.close(fd)


def _userns_child(id_map: str) -> UsernsChild:
    """Fork a child that makes a fresh user namespace; write its id map; hold the namespace by
    fd. The child then waits for one line on its pipe: ``{"dev", "mkdir"}``, on which it
    becomes the namespace's uid 0, makes the sandbox's mount namespace (a copy of the keeper's,
    mounts made since included), prepares /dev there (:func:`_make_dev`) and makes the paths
    (:func:`_make_paths`), says ``m`` (or ``e`` and why) and exits at the pipe's end; it exits
    at once when the pipe ends first."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(hold_w)
            _unshare(CLONE_NEWUSER)
            os.write(ready_w, b"u")
            line = b""
            while not line.endswith(b"\n"):
                chunk = os.read(hold_r, 65536)
                if not chunk:
                    break
                line += chunk
            if line.endswith(b"\n"):  # the id map is written; what to make
                try:
                    what = json.loads(line)
                    os.setgroups([])
                    os.setresgid(0, 0, 0)
                    os.setresuid(0, 0, 0)
                    _unshare(CLONE_NEWNS)
                    _make_dev(what["dev"])
                    if what["mkdir"]:
                        mk = what["mkdir"]
                        _make_paths(mk["tree"], mk["dirs"], mk["files"])
                    os.write(ready_w, b"m")
                except BaseException as e:  # noqa: BLE001 - said to the keeper
                    os.write(ready_w, f"e{e}".encode()[:500])
                os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    try:
        if os.read(ready_r, 1) != b"u":
            raise OSError("the user namespace's child failed")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(id_map)
        userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        os.close(ready_r)
        os.close(hold_w)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    return UsernsChild(pid, id_map, ready_r, hold_w, userns)


def _bind(source: str, target: str, flags: int) -> None:
    """bwrap's bind_mount: a recursive bind, then ``flags`` ORed into the mount's own flags."""
    _mount(source, target, None, MS_BIND | MS_REC)
    current = os.statvfs(target).f_flag & MOUNT_FLAGS
    if current | flags != current:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | current | flags)


def _make_paths(tree: str, dirs: list[str], files: list[str]) -> None:
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


def _make_dev(dest: str) -> None:
    """What bwrap's ``--dev DEST`` makes (bubblewrap.c, SETUP_MOUNT_DEV), step by step, as the
    sandbox's uid 0 in a mount namespace its user namespace owns: the same tmpfs, device nodes,
    links, shm and devpts, with the same flags and owners. Each exec binds it (``--dev-bind``,
    which adds no flag a mount here lacks) instead of making its own."""
    _mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name in DEV_NODES:
        node = f"{dest}/{name}"
        os.close(os.open(node, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        _bind(f"/dev/{name}", node, MS_NOSUID)  # devices: no MS_NODEV
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dest}/{name}")
    os.symlink("/proc/self/fd", f"{dest}/fd")
    os.symlink("/proc/kcore", f"{dest}/core")
    os.mkdir(f"{dest}/shm", 0o755)
    os.mkdir(f"{dest}/pts", 0o755)
    _mount("devpts", f"{dest}/pts", "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=620")
    os.symlink("pts/ptmx", f"{dest}/ptmx")


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)


def _namespaces(join_netns: str | None) -> None:
    """A keeper's mount and network namespaces (or the mount namespace in ``join_netns``'s
    network namespace): mounts private, loopback up, low ports allowed."""
    if join_netns:
        fd = os.open(join_netns, os.O_RDONLY)
        _setns(fd, CLONE_NEWNET)
        os.close(fd)
        _unshare(CLONE_NEWNS)
    else:
        _unshare(CLONE_NEWNS | CLONE_NEWNET)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _loopback_up()
    # the network namespace is host root's: let the sandbox bind ports < 1024, as Docker does
    with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", "w") as f:
        f.write("0")


def _keeper_main(sock: socket.socket, req: dict[str, Any], namespaces_made: bool = False,
                 prepared: UsernsChild | None = None,
                 prepared_exec: tuple[int, socket.socket] | None = None) -> None:
    if not namespaces_made:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
    keeper = Keeper(sock, req)
    keeper.prepared = prepared
    keeper.prepared_exec = prepared_exec
    try:
        keeper.setup(namespaces_made)
    except BaseException as e:  # noqa: BLE001 - reported to the harness
        _send(sock, {"error": str(e)})
        keeper._drop_prepared()
        keeper._reap_setup_child(block=True)  # it exits at its pipe's end, closed by now
        return
    _send(sock, {"ready": os.getpid(), "dev": keeper.mntns >= 0})
    keeper.serve()


# -- fork server ----------------------------------------------------------------------------


class Ahead:
    """A keeper forked ahead (:func:`_keeper_ahead`): its pid, its socket, and the host's mount
    table as a pollable file opened before its fork, which tells whether a mount or unmount
    happened on the host since (its copy of the mounts would then be stale)."""

    def __init__(self, pid: int, line: socket.socket, mounts: int) -> None:
        self.pid = pid
        self.line = line
        self.mounts = mounts

    def stale(self) -> bool:
        poll = select.poll()
        poll.register(self.mounts, select.POLLPRI | select.POLLERR)
        return bool(poll.poll(0))

    def close(self) -> None:
        self.line.close()
        os.close(self.mounts)


def _keeper_ahead(server: socket.socket, id_map: str | None = None) -> Ahead | None:
    """The next keeper, forked before its request: its session and its mount and network
    namespaces made (:func:`_namespaces`) while no start waits, and, given the ``id_map`` of
    the starts before, the user namespace's child with that map written
    (:func:`_userns_child`; used when the request's id map is the same); then it waits on a
    socket pair of its own for the one start request it will serve (nothing of any sandbox is
    in it before). None when the fork fails (the start then forks as before)."""
    mounts = os.open("/proc/self/mounts", os.O_RDONLY | os.O_CLOEXEC)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        os.close(mounts)
        return None
    if pid == 0:
        code = 0
        try:
            ours.close()
            os.close(mounts)
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            failed = None
            prepared = None
            prepared_exec = None
            try:
                _namespaces(None)
                if id_map:
                    with contextlib.suppress(OSError):  # else made at the setup, as before
                        prepared = _userns_child(id_map)
                    held = () if prepared is None else (prepared.ready_r, prepared.hold_w,
                                                        prepared.userns)
                    prepared_exec = _first_exec_child((theirs.fileno(), *held))
            except OSError as e:
                failed = str(e)
            got = _recv_request(theirs)
            theirs.close()
            if got is not None:
                req, fds = got
                keeper = socket.socket(fileno=fds[0])
                for fd in fds[1:]:
                    os.close(fd)
                if failed is not None:
                    _send(keeper, {"error": failed})
                else:
                    _keeper_main(keeper, req, namespaces_made=True, prepared=prepared,
                                 prepared_exec=prepared_exec)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    theirs.close()
    return Ahead(pid, ours, mounts)


def main() -> None:
    server = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    ahead: Ahead | None = None
    id_map: str | None = None  # the last start's: a keeper ahead prepares a user namespace with it
    while True:
        if ahead is None:
            ahead = _keeper_ahead(server, id_map)
        got = _recv_request(server)
        if got is None:
            return
        req, fds = got
        if isinstance(req.get("id_map"), str):
            id_map = req["id_map"]
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        if ahead is not None and ahead.stale():
            _kill_group(ahead.pid)  # a mount on the host since its fork: not seen in its copy
            ahead.close()
            ahead = None
        if ahead is not None and not req.get("join_netns"):
            taken, ahead = ahead, None
            try:
                socket.send_fds(taken.line, [_frame(req)], fds)
            except OSError:
                _kill_group(taken.pid)  # forked anew below
            else:
                os.close(fds[0])
                continue
            finally:
                taken.close()
        try:
            pid = os.fork()
        except OSError as e:  # EAGAIN at a pids limit, ENOMEM: this start fails, not the others
            keeper = socket.socket(fileno=fds[0])
            _send(keeper, {"error": f"fork: {e.strerror}"})
            keeper.close()
            continue
        if pid == 0:
            code = 0
            try:
                server.close()
                if ahead is not None:  # kept for the next start: its end only the server's
                    ahead.close()
                _keeper_main(socket.socket(fileno=fds[0]), req)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        os.close(fds[0])


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)

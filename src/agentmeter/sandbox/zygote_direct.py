"""An exec without bwrap (standard library only; see zygote_server.py): what bwrap and setpriv
did for each exec of a root-run sandbox, done by the exec's own *init*.

The keeper forks the init as PID 1 of a new PID namespace (:func:`fork_init`; ahead, while no
exec runs, so its setup is off the exec's path); it dies with its keeper (``PR_SET_PDEATHSIG``,
armed again after each change of ids, which clears it), and the keeper waits for it as bwrap's
monitor waited for its child. As host root it leads a session of its own, joins the sandbox's
cgroup and a fresh session keyring and the sandbox's mount namespace, and builds the exec's
root there as bwrap's arguments did (local_command.py), in a mount namespace of its own
(zygote_root.py: the tree bound nosuid,nodev, the sandbox's prepared /dev bound nosuid, a /proc
of the exec's PID namespace with the masks of masks.py, the task mounts and resolv.conf, each
on a target resolved inside the tree; then ``pivot_root`` into the tree). It then enters the
sandbox's user namespace as its uid 0, makes the exec's IPC, UTS and cgroup namespaces, sets
the hostname, cuts its capability bounding set to the root exec's and sets no_new_privs and the
seccomp filter (the program sent once per sandbox, the same every exec was given). (Its PID and
mount namespaces are thus host root's, not the sandbox's as bwrap's were: the sandbox's root
holds no capability over them at all.) On the request it takes the exec's descriptors (stdin,
stdout, stderr) and closes every other, changes directory, cuts the bounding set to nothing for
the agent, sets the groups and ids, the capability sets (as bwrap and setpriv left them: the
root set permitted, effective, inheritable and ambient; nothing for the agent; so it holds
nothing the command lacks; never dumpable: its memory is a copy of the keeper's) and starts
the command (glibc's ``posix_spawnp``: a session of its own, every signal's action default,
the request's environment, its ``PATH`` for the search), whose exit ends the init and so the
PID namespace with everything the exec started. Killing the init (its process group) ends the
exec the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import socket
from collections.abc import Callable
from typing import Any, NoReturn

from . import zygote_calls as calls
from . import zygote_wire as wire
from .zygote_root import build_root

CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWPID, CLONE_NEWCGROUP = 0x08000000, 0x04000000, 0x20000000, 0x02000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_NO_NEW_PRIVS = 22, 2, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 47, 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SPAWN_SETSIGDEF, SPAWN_SETSID = 0x04, 0x80

_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("prctl", "capset", "posix_spawnp", "posix_spawnattr_init",
              "posix_spawnattr_setsigdefault", "posix_spawnattr_setflags"):  # looked up once, before any fork
    getattr(_libc, _name)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _prctl(option: int, arg: int, what: str) -> None:
    calls.check(_libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0)), what)


def _caps(keep: list[int]) -> None:
    """Bounding set cut to ``keep``; ``keep`` permitted, effective, inheritable and ambient
    (after the ids are set: an agent's are all empty)."""
    mask = sum(1 << c for c in keep)
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)(_CapData(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, mask & 0xFFFFFFFF),
                          _CapData(mask >> 32, mask >> 32, mask >> 32))
    calls.check(_libc.capset(ctypes.byref(header), data), "capset")
    for cap in keep:
        calls.check(_libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_RAISE),
                                ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0)),
                    "raise ambient")


def _cut_bounding(keep: list[int], among: list[int] | None = None) -> None:
    """Drop every capability of the bounding set but ``keep`` (only those of ``among`` when
    given: the rest are gone already)."""
    for cap in range(64) if among is None else among:
        if cap not in keep and _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0),
                                           ctypes.c_ulong(0), ctypes.c_ulong(0)) < 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the kernel's last capability
                return
            calls.check(-1, "drop a bounding capability")


def _load_seccomp(program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    calls.check(_libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog),
                            ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")


def _arg_area() -> tuple[int, int]:
    """Where this process's arguments are in its memory (what /proc/self/cmdline shows)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)


def _name_init(area: tuple[int, int], argv: list[str]) -> None:
    """This init as the exec sees it (/proc/1/cmdline and comm): ``agentmeter-init -- ARGV``,
    as bwrap's showed ``bwrap ... -- ARGV`` (not the zygote's interpreter and script paths):
    written over its own argument area, cut to its length."""
    start, end = area
    text = b"\0".join(a.encode() for a in ["agentmeter-init", "--", *argv])[:end - start - 1]
    ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)
    _libc.prctl(15, b"agentmeter-init", 0, 0, 0)  # PR_SET_NAME


def _which(name: str, path: str | None) -> str | None:
    """Where execvp finds ``name``: itself if it has a slash, else the first executable file
    of that name in ``path`` (glibc's default when unset)."""
    if "/" in name:
        return name
    for d in (path if path is not None else "/bin:/usr/bin").split(":"):
        candidate = f"{d or '.'}/{name}"
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _spawn(argv: list[str], env: dict[str, str]) -> int:
    """glibc's posix_spawnp (a vfork: no copy of this interpreter's memory) with a session of
    its own and every signal's action default: Python's os.posix_spawn cannot name glibc's
    internal signals (32, 33), which glibc's spawn would otherwise leave ignored in the
    command (bwrap's execvp left them default)."""
    attr = ctypes.create_string_buffer(512)  # posix_spawnattr_t (336 bytes on glibc)
    calls.check(-_libc.posix_spawnattr_init(attr), "posix_spawnattr_init")
    every = ctypes.create_string_buffer(b"\xff" * 8 + b"\0" * 120)  # sigset_t: signals 1-64
    calls.check(-_libc.posix_spawnattr_setsigdefault(attr, every), "setsigdefault")
    calls.check(-_libc.posix_spawnattr_setflags(attr, ctypes.c_short(SPAWN_SETSID | SPAWN_SETSIGDEF)),
                "setflags")
    args = (ctypes.c_char_p * (len(argv) + 1))(*[a.encode() for a in argv], None)
    envp = (ctypes.c_char_p * (len(env) + 1))(*[f"{k}={v}".encode() for k, v in env.items()], None)
    pid = ctypes.c_int(0)
    err = _libc.posix_spawnp(ctypes.byref(pid), args[0], None, attr, args, envp)
    if err:
        raise OSError(err, os.strerror(err))
    return pid.value


def _status(status: int) -> int:
    """bwrap's: the exit code, or 128 + the signal that killed it."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _die(message: str, code: int = 1) -> NoReturn:
    with contextlib.suppress(OSError):
        os.write(2, f"agentmeter sandbox exec: {message}\n".encode())
    os._exit(code)


def run(spec: dict[str, Any], area: tuple[int, int], parent: int, req: dict[str, Any],
        fds: list[int]) -> NoReturn:
    """The request, in the exec's init (its root built, its bounding set cut to ``spec``'s
    "caps", its argument area at ``area``, its keeper's pidfd ``parent``): see the module
    docstring."""
    d = req["direct"]
    # stdin, stdout, stderr at 0-2, the keeper's pidfd at 3
    moved = [os.dup(fd) for fd in (*fds[:3], parent)]
    for target, fd in enumerate(moved):
        os.dup2(fd, target, inheritable=target < 3)
    os.closerange(len(moved), 1 << 20)  # nothing of the keeper's or the setup's
    try:
        os.chdir(d["cwd"])
    except OSError as e:
        _die(f"cannot change directory to {d['cwd']}: {e.strerror}")
    keep = list(d["caps"])
    try:
        _cut_bounding(keep, spec["caps"])
        os.setgroups(d["groups"])
        os.setresgid(d["gid"], d["gid"], d["gid"])
        os.setresuid(d["uid"], d["uid"], d["uid"])
        _with_parent(3)  # a change of ids cleared the parent-death signal
        os.close(3)
        _caps(keep)
        # never dumpable (the change of ids left it so; said again): its memory is a copy of
        # the keeper's (earlier requests, their environments), which a root command with the
        # init's ids and capabilities could otherwise read or write through /proc/1/mem
        _prctl(PR_SET_DUMPABLE, 0, "dumpable")
    except OSError as e:
        _die(str(e))
    env: dict[str, str] = {**d["env"], "PWD": d["cwd"]}  # as bwrap's --chdir set it
    if "PATH" in env:  # posix_spawnp searches the caller's PATH: the command's
        os.putenv("PATH", env["PATH"])
    else:
        os.unsetenv("PATH")
    _name_init(area, d["argv"])
    argv: list[str] = d["argv"]
    try:
        try:
            child = _spawn(argv, env)
        except OSError as e:  # a script without "#!": execvp (bwrap's) ran it with /bin/sh
            found = _which(argv[0], env.get("PATH"))
            if e.errno != errno.ENOEXEC or found is None:
                raise
            child = _spawn(["/bin/sh", found, *argv[1:]], env)
    except OSError as e:  # status as before: setpriv's 127 for the agent, bwrap's 1 for root
        _die(f"execvp {argv[0]}: {e.strerror}", 127 if d["uid"] else 1)
    for fd in (0, 1, 2):
        os.close(fd)
    while True:  # the init reaps what is left to it until the command exits
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            os._exit(_status(status))


def _with_parent(parent: int) -> None:
    """SIGKILL when the parent (``parent``: its pidfd) exits; at once if it has."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "pdeathsig")
    if select.select([parent], [], [], 0)[0]:
        os._exit(127)


def fork_init(child: Callable[[socket.socket, int], NoReturn]) -> tuple[int, socket.socket] | None:
    """Fork an exec's init: PID 1 of a new PID namespace (owned by the caller's user namespace,
    host root's), on a socket pair of its own (:func:`calls.fork_paired`); it runs ``child``
    with its end and a pidfd of its parent. The caller's later children are in its own PID
    namespace again. None when the fork fails."""
    me = os.pidfd_open(os.getpid())
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        calls.unshare(CLONE_NEWPID)
        forked = calls.fork_paired()
        if forked is not None and forked[0] == 0:
            os.close(own)
            child(forked[1], me)
        calls.setns(own, CLONE_NEWPID)
    finally:
        os.close(own)
        os.close(me)
    return forked


def init_main(spec: dict[str, Any], entry: dict[str, Any], namespaces: tuple[int, int],
              parent: int, line: socket.socket | None,
              got: tuple[dict[str, Any], list[int]] | None) -> NoReturn:
    """An exec's init (host root, forked by :func:`fork_init`): it joins the sandbox's cgroup,
    a fresh session keyring (``entry``) and its mount namespace (``namespaces``: the user and
    mount namespaces' descriptors), builds the exec's root there (:func:`build_root`), enters
    the user namespace as its uid 0, makes the exec's IPC, UTS and cgroup namespaces and sets
    the hostname; then the request (on ``line``, or ``got``) is run (:func:`run`). It dies with
    its keeper (``parent``: its pidfd)."""
    code = 127
    with contextlib.suppress(BaseException):
        _with_parent(parent)
        for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)  # PID 1: nothing inside can signal it then
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        userns, mntns = namespaces
        try:
            calls.join_session(entry["cgroup"], entry["keyring"], entry["keyctl_nr"])
            calls.setns(mntns, calls.CLONE_NEWNS)
            area = _arg_area()  # the host's /proc: the tree's is the sandbox's to forge
            build_root(spec)
            calls.setns(userns, calls.CLONE_NEWUSER)  # uid 0 there is host SHIFT_BASE
            os.setgroups([])
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _with_parent(parent)  # the change of ids cleared it
            calls.unshare(CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
            socket.sethostname(spec["hostname"])
            _cut_bounding(spec["caps"])  # the root exec's set: the most any exec keeps
            # last: the filter refuses setns, unshare and mounts (and allows what is left:
            # setgroups, setresuid, capset, prctl, close_range, clone, wait4)
            _prctl(PR_SET_NO_NEW_PRIVS, 1, "no_new_privs")
            if spec["seccomp"]:
                _load_seccomp(bytes.fromhex(spec["seccomp"]))
        except OSError as e:
            if got is None and line is not None:
                got = wire.recv_request(line)  # said on the exec's stderr when it comes
            if got is not None:
                os.dup2(got[1][2], 2)
            _die(f"cannot build the exec's root: {e}")
        if got is None:
            assert line is not None
            got = wire.recv_request(line)
            if got is None:  # the keeper ended
                os._exit(0)
        if line is not None:
            line.close()
        run(spec, area, parent, *got)
    os._exit(code)

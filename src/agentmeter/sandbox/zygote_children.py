"""The children a zygote keeper forks (standard library only; see zygote_server.py): each
exec's child, which enters the sandbox and becomes the exec's bwrap, and the user namespace's
child, which holds the sandbox's user namespace and prepares its mount namespace."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Callable
from typing import Any, NoReturn

from . import zygote_calls as calls
from . import zygote_direct as direct
from . import zygote_wire as wire


def run_exec(req: dict[str, Any], fds: list[int]) -> int:
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

def fork_exec_child(close: tuple[int, ...],
                    enter: Callable[[socket.socket], bool]) -> tuple[int, socket.socket] | None:
    """An exec's child, forked on a socket pair of its own: it closes ``close`` (its keeper's
    descriptors), enters the sandbox (``enter``, given its end of the pair; False: the keeper
    ended or the setup failed, and it exits), then waits for the one exec it will become
    (:func:`run_exec`: a bwrap). It exits when the socket ends first. None when the fork
    fails."""
    forked = calls.fork_paired()
    if forked is None or forked[0] > 0:
        return forked
    line = forked[1]
    code = 127
    with contextlib.suppress(BaseException):
        for fd in close:
            os.close(fd)
        if not enter(line):
            os._exit(0)
        got = wire.recv_request(line)
        if got is None:  # the keeper ended
            os._exit(0)
        line.close()
        code = run_exec(*got)
    os._exit(code)


def first_exec_child(close: tuple[int, ...]) -> tuple[int, socket.socket] | None:
    """A sandbox's first exec's init (:func:`direct.fork_init`), forked before the sandbox's
    namespaces exist (by a keeper forked ahead, before its request, or during the setup): it
    closes ``close`` (its keeper's descriptors) and waits on its socket for
    ``{"cgroup", "keyring", "keyctl_nr", "root"}`` with the user and mount namespaces'
    descriptors, then becomes what every exec's init does (:func:`direct.init_main`). It exits
    when the socket ends first (the setup failed, or the keeper ended). None when the fork
    fails."""

    def child(line: socket.socket, parent: int) -> NoReturn:
        with contextlib.suppress(BaseException):
            for fd in close:
                os.close(fd)
            got = wire.recv_request(line)
            if got is not None and len(got[1]) == 2 and got[0].get("root"):
                what, (userns, mntns) = got
                direct.init_main(what["root"], what, (userns, mntns), parent, line, None)
        os._exit(0)

    return direct.fork_init(child)


class UsernsChild:
    """A child in a fresh user namespace whose id map is written (:func:`userns_child`),
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


def userns_child(id_map: str) -> UsernsChild:
    """Fork a child that makes a fresh user namespace; write its id map; hold the namespace by
    fd. The child then waits for one line on its pipe: ``{"dev", "mkdir"}``, on which it
    becomes the namespace's uid 0, makes the sandbox's mount namespace (a copy of the keeper's,
    mounts made since included), prepares /dev there (:func:`calls.make_dev`) and makes the paths
    (:func:`calls.make_paths`), says ``m`` (or ``e`` and why) and exits at the pipe's end; it exits
    at once when the pipe ends first."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(hold_w)
            calls.unshare(calls.CLONE_NEWUSER)
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
                    calls.unshare(calls.CLONE_NEWNS)
                    calls.make_dev(what["dev"])
                    if what["mkdir"]:
                        mk = what["mkdir"]
                        calls.make_paths(mk["tree"], mk["dirs"], mk["files"])
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
"""The zygote's fork server (standard library only; see zygote_server.py): one per harness
process, host root in the host's namespaces; it forks a keeper per start request, one ahead of
its request."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys

from . import zygote_calls as calls
from . import zygote_children as children
from . import zygote_wire as wire
from .zygote_keeper import keeper_main


class Ahead:
    """A keeper forked ahead (:func:`keeper_ahead`): its pid, its socket, and the host's mount
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


def keeper_ahead(server: socket.socket, id_map: str | None = None) -> Ahead | None:
    """The next keeper, forked before its request: its session and its mount and network
    namespaces made (:func:`calls.namespaces`) while no start waits, and, given the ``id_map`` of
    the starts before, the user namespace's child with that map written
    (:func:`children.userns_child`; used when the request's id map is the same); then it waits on a
    socket pair of its own for the one start request it will serve (nothing of any sandbox is
    in it before). None when the fork fails (the start then forks as before)."""
    mounts = os.open("/proc/self/mounts", os.O_RDONLY | os.O_CLOEXEC)
    forked = calls.fork_paired()
    if forked is None:
        os.close(mounts)
        return None
    pid, line = forked  # the child's end in the child, the server's in the server
    if pid == 0:
        code = 0
        try:
            os.close(mounts)
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            failed = None
            prepared = None
            prepared_exec = None
            try:
                calls.namespaces(None)
                if id_map:
                    with contextlib.suppress(OSError):  # else made at the setup, as before
                        prepared = children.userns_child(id_map)
                    held = () if prepared is None else (prepared.ready_r, prepared.hold_w,
                                                        prepared.userns)
                    prepared_exec = children.first_exec_child((line.fileno(), *held))
            except OSError as e:
                failed = str(e)
            got = wire.recv_request(line)
            line.close()
            if got is not None:
                req, fds = got
                keeper = socket.socket(fileno=fds[0])
                for fd in fds[1:]:
                    os.close(fd)
                if failed is not None:
                    wire.send(keeper, {"error": failed})
                else:
                    keeper_main(keeper, req, namespaces_made=True, prepared=prepared,
                                prepared_exec=prepared_exec)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    return Ahead(pid, line, mounts)


def main() -> None:
    server = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    ahead: Ahead | None = None
    id_map: str | None = None  # the last start's: a keeper ahead prepares a user namespace with it
    while True:
        if ahead is None:
            ahead = keeper_ahead(server, id_map)
        got = wire.recv_request(server)
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
            calls.kill_group(ahead.pid)  # a mount on the host since its fork: not seen in its copy
            ahead.close()
            ahead = None
        if ahead is not None and not req.get("join_netns"):
            taken, ahead = ahead, None
            try:
                socket.send_fds(taken.line, [wire.frame(req)], fds)
            except OSError:
                calls.kill_group(taken.pid)  # forked anew below
            else:
                os.close(fds[0])
                continue
            finally:
                taken.close()
        try:
            pid = os.fork()
        except OSError as e:  # EAGAIN at a pids limit, ENOMEM: this start fails, not the others
            keeper = socket.socket(fileno=fds[0])
            wire.send(keeper, {"error": f"fork: {e.strerror}"})
            keeper.close()
            continue
        if pid == 0:
            code = 0
            try:
                server.close()
                if ahead is not None:  # kept for the next start: its end only the server's
                    ahead.close()
                keeper_main(socket.socket(fileno=fds[0]), req)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        os.close(fds[0])

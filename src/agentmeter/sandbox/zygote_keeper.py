"""A zygote keeper (standard library only; see zygote_server.py): one per root-run sandbox; it
makes the sandbox's namespaces and mounts, then serves its execs."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
from typing import Any, NoReturn

from . import zygote_calls as calls
from . import zygote_wire as wire
from .zygote_calls import MS_BIND, MS_NODEV, MS_NOSUID, MS_RDONLY, MS_REC, MS_REMOUNT
from .zygote_children import UsernsChild, first_exec_child, fork_exec_child, run_exec, userns_child
from .zygote_direct import fork_init, init_main
from .zygote_root import direct_supported

#: how long the keeper is idle (no request, no exec running) before it forks the next exec's
#: init: a stop or another request that follows an exec at once is not slowed by it
PREFORK_IDLE_S = 0.003


class Keeper:
    def __init__(self, sock: socket.socket, req: dict[str, Any]) -> None:
        self.sock = sock
        self.req = req
        self.userns = -1
        #: the sandbox's mount namespace (owned by its user namespace) with /dev prepared at
        #: req["dev"], which each exec's bwrap binds (--dev-bind); -1: none (bwrap's --dev)
        self.mntns = -1
        self.children: dict[int, int] = {}  # pid -> request id
        #: an exec's init -> its mount namespace, held until its exit is answered
        self.held: dict[int, int] = {}
        self.pidfds: dict[int, int] = {}  # pidfd -> pid
        #: the next exec's child, forked ahead (pid, its socket); for an exec without bwrap
        #: when :attr:`root` is set (it has built the exec's root: zygote_direct.py)
        self.spare: tuple[int, socket.socket] | None = None
        #: the root of an exec without bwrap (req["root"]), once the sandbox's mount namespace
        #: with its /dev exists; None: every exec is a bwrap
        self.root: dict[str, Any] | None = None
        #: the user namespace's child made ahead (by a keeper forked ahead), if any
        self.prepared: UsernsChild | None = None
        #: the first exec's child forked ahead (by a keeper forked ahead), if any
        self.prepared_exec: tuple[int, socket.socket] | None = None
        #: the user namespace's child of the setup, until reaped
        self.setup_child = -1

    def setup(self, namespaces_made: bool = False) -> None:
        """The keeper script of local_keeper.py, as system calls (``namespaces_made``: by a
        keeper forked ahead, :func:`calls.namespaces`)."""
        r = self.req
        if not namespaces_made:
            calls.namespaces(r.get("join_netns"))
        os.chdir(r["layers"])  # lowerdir holds paths relative to it (mount options are short)
        rw = r["rw"]
        if r["disk_mb"]:
            calls.mount("tmpfs", rw, "tmpfs", 0, f"size={r['disk_mb']}m,mode=0755")
            for d in ("upper", "work"):
                os.mkdir(f"{rw}/{d}")
            os.chown(f"{rw}/upper", r["owner"], r["owner"])
        tree = r["tree"]
        calls.mount("overlay", tree, "overlay", 0, r["overlay_opts"])
        for d in r["host_dirs"]:
            calls.mount(d, tree + d, None, MS_BIND | MS_REC)
            calls.mount(None, tree + d, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NODEV | MS_NOSUID)
        for src, dst in r["binds"]:
            calls.mount(src, dst, None, MS_BIND | MS_REC)
        self.userns, self.mntns = self._make_userns(r["id_map"], r.get("dev"), r.get("mkdir"))

    def _make_userns(self, id_map: str, dev: str | None,
                     mkdir: dict[str, Any] | None = None) -> tuple[int, int]:
        """A fresh user namespace with ``id_map`` (made by a short-lived child; held by fd):
        the one :func:`zygote_forkserver.keeper_ahead` prepared (``prepared``) when its id map is this one,
        else made now (:func:`userns_child`). With ``dev``, also the sandbox's mount
        namespace, owned by that user namespace, in which the child (the sandbox's uid 0)
        prepared /dev at ``dev`` (:func:`calls.make_dev`), then, chrooted into the sandbox tree,
        made ``mkdir``'s directories and files (:func:`calls.make_paths`: the start's workdir and
        mount targets). The child's exit is not waited for: it is reaped off the start's path
        (:meth:`_reap_setup_child`)."""
        child = self.prepared if self.prepared is not None and self.prepared.id_map == id_map else None
        if child is None:
            self._drop_prepared()
            child = userns_child(id_map)
        self.prepared = None
        self.setup_child = child.pid
        early, self.prepared_exec = self.prepared_exec, None
        try:
            if not dev:
                return os.dup(child.userns), -1
            os.write(child.hold_w, json.dumps({"dev": dev, "mkdir": mkdir}).encode() + b"\n")
            if early is None:  # the first exec's child, forked while that child works
                early = first_exec_child((child.ready_r, child.hold_w, self.sock.fileno()))
            said = os.read(child.ready_r, 512)
            if said != b"m":
                raise OSError(said[1:].decode(errors="replace") or "the user namespace's child failed")
            mntns = os.open(f"/proc/{child.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            userns = os.dup(child.userns)
            self.root = self.req.get("root") if direct_supported() else None
            self.prepared_exec, early = early, None  # given its namespaces after ready
            return userns, mntns
        finally:
            if early is not None:  # the setup failed
                self._drop(early)
            child.close()  # the child exits at its pipe's end

    def hand_first(self) -> None:
        """The first exec's init (forked ahead or during the setup) given the sandbox's cgroup,
        keyring, root and user and mount namespaces: after ``ready``, so that the harness hears
        it before that init's setup takes its share of the CPU."""
        first, self.prepared_exec = self.prepared_exec, None
        if first is None:
            return
        enter = {"cgroup": self.req["cgroup"], "keyring": self.req["keyring"],
                 "keyctl_nr": self.req.get("keyctl_nr"), "root": self.root}
        try:
            socket.send_fds(first[1], [wire.frame(enter)], [self.userns, self.mntns])
        except OSError:
            self._drop(first)
            return
        self.spare = first

    @staticmethod
    def _drop(spare: tuple[int, socket.socket]) -> None:
        """A child forked ahead, not to be used: killed and reaped."""
        pid, line = spare
        line.close()
        calls.kill_group(pid)
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
            # the next exec's child, forked while nothing waits and no exec runs (off the
            # exec's path, and not beside it: it builds the exec's root, which takes CPU)
            ahead = self.spare is None and prefork and not self.children
            events = sel.select(PREFORK_IDLE_S if ahead else None)
            if not events and ahead:
                self.spare = self._prefork()
                # fork failing (EAGAIN at a pids limit, ENOMEM) would otherwise be retried at
                # once, forever: a keeper spinning at 100% CPU while the machine is full
                prefork = self.spare is not None
                continue
            prefork = True  # a request or an exec's end: try again after it
            for key, _ in events:
                if key.fileobj is self.sock:
                    got = wire.recv_request(self.sock)
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
                    calls.kill_group(pid)
            return
        pid = -1
        direct = "direct" in req
        if direct and self.root is None:
            wire.send(self.sock, {"id": req["id"], "error": "no root for an exec without bwrap"})
            return
        # the spare is an exec's init when there is a root: a bwrap (a copy out's busybox)
        # gets a child of its own, and the spare stays for the next exec without bwrap
        if (self.spare is not None and direct == (self.root is not None)
                and req["cgroup"] == self.req["cgroup"] and req["keyring"] == self.req["keyring"]):
            pid, line = self.spare
            self.spare = None
            try:
                socket.send_fds(line, [wire.frame(req)], fds)
            except OSError:
                calls.kill_group(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                pid = -1
            finally:
                line.close()
        if pid < 0 and direct:
            forked = fork_init(lambda _line, parent: self._init(parent, None, (req, fds)))
            if forked is None:
                wire.send(self.sock, {"id": req["id"], "error": "fork failed"})
                return
            pid = forked[0]
            forked[1].close()
        if pid < 0:
            try:
                pid = os.fork()
            except OSError as e:
                wire.send(self.sock, {"id": req["id"], "error": f"fork: {e.strerror}"})
                return
            if pid == 0:
                code = 127
                with contextlib.suppress(BaseException):
                    self._enter(req["cgroup"], req["keyring"])
                    code = run_exec(req, fds)  # never returns but on failure
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = req["id"]
        self.pidfds[pidfd] = pid
        sel.register(pidfd, selectors.EVENT_READ)
        if direct:  # its mount namespace, so that its teardown follows the exit's answer
            with contextlib.suppress(OSError):
                self.held[pid] = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def _prefork(self) -> tuple[int, socket.socket] | None:
        """The next exec's child, forked ahead: an exec's init (:func:`init_main`) that builds
        the exec's root and waits for its request; or, without a root, a child that joins
        the cgroup, a fresh session keyring and the user namespace and waits to exec bwrap
        (:func:`fork_exec_child`). Either closes its keeper's socket (only the keeper answers
        the harness)."""
        if self.root is not None:
            return fork_init(lambda line, parent: self._init(parent, line, None))

        def enter(_line: socket.socket) -> bool:
            self._enter(self.req["cgroup"], self.req["keyring"])
            return True

        return fork_exec_child((self.sock.fileno(),), enter)

    def _init(self, parent: int, line: socket.socket | None,
              got: tuple[dict[str, Any], list[int]] | None) -> NoReturn:
        """In an exec's init forked by this keeper: :func:`init_main` with this sandbox's root."""
        with contextlib.suppress(BaseException):
            self.sock.close()
            assert self.root is not None
            init_main(self.root, {"cgroup": self.req["cgroup"], "keyring": self.req["keyring"],
                                  "keyctl_nr": self.req.get("keyctl_nr")},
                      (self.userns, self.mntns), parent, line, got)
        os._exit(127)

    def _enter(self, cgroup: list[str], keyring: bool) -> None:
        """An exec's first process, before its request (:func:`calls.enter_exec`)."""
        calls.enter_exec(cgroup, keyring, self.req.get("keyctl_nr"), self.userns, self.mntns)

    def _reap(self, pidfd: int, sel: selectors.BaseSelector) -> None:
        pid = self.pidfds.pop(pidfd)
        sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        rid = self.children.pop(pid)
        wire.send(self.sock, {"id": rid, "exit": os.waitstatus_to_exitcode(status)})
        if pid in self.held:
            os.close(self.held.pop(pid))

    def _end(self) -> None:
        """SIGKILL everything it started, say ``ended`` (nothing of the sandbox runs another
        instruction: a SIGKILLed process never returns to user space), then reap it all."""
        started = list(self.children)
        if self.spare is not None:
            pid, line = self.spare
            line.close()  # it exits
            started.append(pid)
        for pid in started:
            calls.kill_group(pid)
        wire.send(self.sock, {"id": -1, "ended": True})
        for pid in started:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self._reap_setup_child(block=True)


def keeper_main(sock: socket.socket, req: dict[str, Any], namespaces_made: bool = False,
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
        wire.send(sock, {"error": str(e)})
        keeper._drop_prepared()
        keeper._reap_setup_child(block=True)  # it exits at its pipe's end, closed by now
        return
    wire.send(sock, {"ready": os.getpid(), "dev": keeper.mntns >= 0,
                     "direct": keeper.root is not None})
    keeper.hand_first()
    keeper.serve()

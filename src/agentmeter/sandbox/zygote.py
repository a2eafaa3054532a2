"""The zygote of root-run local sandboxes: the keeper forks each exec itself (harness side; the
processes are zygote_server.py).

Before, a root-run sandbox's keeper was ``unshare`` + ``sh`` (+ ``ip``, ``mount``s, ``unshare
--user``, ``sh``) and each exec a chain ``keyctl session`` -> ``sh`` (join the cgroup) ->
``nsenter`` -> ``bwrap``, started by the harness: about 16 programs per lifecycle. Now:

- one *fork server* per harness process (a small Python started once, host root in the host's
  namespaces) forks each sandbox's keeper;
- the keeper makes the namespaces, mounts and user namespace by system calls (no program run)
  and stays as the sandbox's zygote: an exec is a request on the keeper's socket (the exec's
  argv, environment, directory and ids, or bwrap's argv; cgroup files; with the exec's
  stdin/stdout/stderr and seccomp program passed as descriptors). While idle, the keeper forks
  the next exec's child, which joins the cgroup and a fresh session keyring as host root,
  enters the sandbox's user namespace as its uid 0 and waits on a socket pair of its own; a
  request goes to it. That child is the exec's init,
  PID 1 of its own PID namespace, which runs the exec without bwrap (zygote_direct.py: it
  builds the exec's namespaces and root ahead and on the request sets what bwrap and setpriv
  set, then starts the command); a bwrap request (the copy-out's busybox commands, or a keeper
  without a prepared /dev) goes to a child forked for it, which keeps only its descriptors and
  execs bwrap.

An exec is thus its init + the command (bwrap's were three processes). At its setup the
keeper also makes the sandbox's own mount namespace (a copy of its own, owned by the sandbox's
user namespace) in which a child, the sandbox's uid 0, prepares /dev once (what bwrap's
``--dev`` makes: the same tmpfs, nodes, links and devpts, with the same flags and owners) and
then, chrooted into the tree, makes the start's workdir and mount targets, and /dev and /proc
where the image lacks them (no first bwrap); a
keeper forked ahead has that child with its user namespace, and the first exec's child, made
before its request (off the start's and the first exec's path). Each exec's child joins that
mount namespace and binds the prepared /dev (its init; a bwrap exec: ``--dev-bind``) instead of
making its own: the execs of one sandbox share its /dev, as ``docker exec`` does. Stop shuts
the socket's sending side and returns once the keeper has killed and reaped its execs (its end
of the socket closed); the kernel's teardown of its namespaces is waited for on the thread that
then removes the sandbox's directory (local_dirs.discard). The keeper's socket is a socket pair
whose other end only the harness holds; no exec inherits a descriptor of it (the exec's init,
or the child execing bwrap, closes every descriptor but those the exec was given), and an
exec's processes live in their own PID namespace, so nothing in a sandbox can reach its zygote
(tests/test_sandbox_zygote.py attacks this). The rootless backend keeps the chain of programs
(local_command.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from agentmeter.sandbox import zygote_wire
from agentmeter.sandbox.spec import SandboxError

SERVER = Path(__file__).with_name("zygote_server.py")

_lock = threading.Lock()
_server: tuple[subprocess.Popen[bytes], socket.socket] | None = None


def _forget_in_child() -> None:
    global _server, _lock
    _server = None  # a forked child does not share its parent's fork server
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


#: how long a keeper's setup (namespaces, mounts, id map) may take before the start fails
READY_TIMEOUT_S = 120.0


def _fork_server() -> socket.socket:
    global _server
    if _server is not None:
        if _server[0].poll() is None:
            return _server[1]
        _server[1].close()  # a dead server's socket, before a new one is made
        _server = None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(SERVER), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    finally:
        theirs.close()
    _server = (proc, ours)
    return ours


def start_keeper(request: dict[str, Any]) -> Keeper:
    """A keeper for ``request`` (zygote_keeper.Keeper.setup), ready; blocking (on a thread)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _lock:
            server = _fork_server()
            socket.send_fds(server, [zygote_wire.frame(request)], [theirs.fileno()])
    except OSError as e:
        ours.close()
        raise SandboxError(f"the sandbox zygote is not running: {e}") from e
    finally:
        theirs.close()
    line = bytearray()
    ours.settimeout(READY_TIMEOUT_S)  # a keeper stuck in its setup never holds a start forever
    try:
        while not line.endswith(b"\n"):
            chunk = ours.recv(4096)
            if not chunk:
                break
            line += chunk
    except TimeoutError:
        ours.close()
        raise SandboxError(f"the sandbox's keeper was not ready within {READY_TIMEOUT_S:.0f} s "
                           "(its setup hung)") from None
    try:
        msg = json.loads(line) if line else {"error": "the keeper exited"}
    except ValueError:
        msg = {"error": f"the keeper said {bytes(line)!r}"}
    if "ready" not in msg:
        ours.close()
        raise SandboxError(str(msg.get("error")))
    ours.setblocking(False)
    return Keeper(ours, int(msg["ready"]), dev=bool(msg.get("dev")), direct=bool(msg.get("direct")))


class Exec:
    """One exec through the zygote, shaped like the asyncio process ``collect_output`` takes."""

    def __init__(self, keeper: Keeper, rid: int) -> None:
        self._keeper = keeper
        self.rid = rid
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._transports: list[asyncio.BaseTransport] = []
        self.returncode: int | None = None

    async def wait(self) -> int:
        self.returncode = await asyncio.shield(self.exited)
        return self.returncode

    async def kill(self) -> None:
        """SIGKILL the exec's process group (bwrap leads it: its PID namespace ends)."""
        if not self.exited.done():
            with contextlib.suppress(OSError, SandboxError):
                await self._keeper.request({"op": "kill", "id": self.rid}, [])

    def close(self) -> None:
        for t in self._transports:
            t.close()


class Keeper:
    """The harness's end of a keeper (see module docstring): ``pid``, ``poll`` like a Popen."""

    def __init__(self, sock: socket.socket, pid: int, *, dev: bool = False,
                 direct: bool = False) -> None:
        self._sock = sock
        self.pid = pid
        #: the keeper prepared the sandbox's /dev (local_dirs.DEV_DIR) for its execs to bind
        self.dev = dev
        #: the keeper runs execs without bwrap (zygote_direct.py): it has their root
        self.direct = direct
        self._pidfd = os.pidfd_open(pid)
        self._buf = bytearray()
        self._execs: dict[int, Exec] = {}
        self._next = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send_lock: asyncio.Lock | None = None
        self._closed = False

    def poll(self) -> int | None:
        """None while the keeper runs."""
        if self._pidfd < 0:
            return 0
        return None if not select.select([self._pidfd], [], [], 0)[0] else 0

    def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._loop = loop
        self._send_lock = asyncio.Lock()
        loop.add_reader(self._sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone()
            return
        self._buf += data
        while (end := self._buf.find(b"\n")) >= 0:
            try:
                msg = json.loads(self._buf[:end])
                del self._buf[: end + 1]
                int(msg["id"])
            except (ValueError, KeyError, TypeError):  # not the keeper's: trust it no further
                self.close()
                self._gone()
                return
            ex = self._execs.pop(msg["id"], None)
            if ex is None or ex.exited.done():
                continue
            if "exit" in msg and not msg.get("error"):
                ex.exited.set_result(int(msg["exit"]))
            else:
                ex.exited.set_exception(SandboxError(f"exec failed: {msg.get('error')}"))

    def _gone(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._closed = True
        for ex in self._execs.values():
            if not ex.exited.done():
                ex.exited.set_exception(SandboxError("the sandbox's keeper exited"))
        self._execs.clear()

    async def request(self, msg: dict[str, Any], fds: list[int]) -> None:
        if self._closed:
            raise SandboxError("the sandbox's keeper exited")
        self._attach()
        assert self._send_lock is not None and self._loop is not None
        payload = zygote_wire.frame(msg)
        async with self._send_lock:
            while True:
                try:
                    sent = (socket.send_fds(self._sock, [payload], fds) if fds
                            else self._sock.send(payload))
                    break
                except BlockingIOError:
                    ready = self._loop.create_future()
                    self._loop.add_writer(self._sock.fileno(), ready.set_result, None)
                    try:
                        await ready
                    finally:
                        self._loop.remove_writer(self._sock.fileno())
            if sent < len(payload):
                await self._loop.sock_sendall(self._sock, payload[sent:])

    async def spawn(self, what: dict[str, Any], *, cgroup: list[str], keyring: bool, stdin: bool,
                    seccomp_fd: int | None) -> Exec:
        """Start an exec through the keeper: ``what`` is ``{"argv", "env"}`` (bwrap's, with
        ``--seccomp 3`` when ``seccomp_fd`` is given) or ``{"direct"}`` (an exec without bwrap:
        zygote_direct.py, when the keeper has its root: :attr:`dev`); pipes for its
        stdout/stderr (and stdin when ``stdin``)."""
        loop = asyncio.get_running_loop()
        self._attach()
        rid = self._next
        self._next += 1
        ex = Exec(self, rid)
        theirs: list[int] = []
        try:
            if stdin:
                r, w = os.pipe()
                theirs.append(r)
                wt, proto = await loop.connect_write_pipe(
                    asyncio.streams.FlowControlMixin, open(w, "wb", 0))  # noqa: SIM115 - the transport's
                ex._transports.append(wt)
                ex.stdin = asyncio.StreamWriter(wt, proto, None, loop)
            else:
                theirs.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            for name in ("stdout", "stderr"):
                r, w = os.pipe()
                theirs.append(w)
                reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
                rt, _ = await loop.connect_read_pipe(
                    lambda reader=reader: asyncio.StreamReaderProtocol(reader, loop=loop),  # type: ignore[misc]
                    open(r, "rb", 0))  # noqa: SIM115 - the transport's
                ex._transports.append(rt)
                setattr(ex, name, reader)
            if seccomp_fd is not None:
                theirs.append(seccomp_fd)
            self._execs[rid] = ex
            await self.request({"op": "exec", "id": rid, **what, "cgroup": cgroup,
                                "keyring": keyring}, theirs)
        except BaseException:
            self._execs.pop(rid, None)
            ex.close()
            raise
        finally:
            for fd in theirs:
                if fd != seccomp_fd:
                    os.close(fd)
        return ex

    def close(self) -> None:
        """Close the keeper's socket: it kills what it started and exits."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._closed = True
        self._sock.close()

    def detach(self) -> None:
        """No more requests or answers through the event loop (before :meth:`end`); execs still
        waiting fail (their processes are killed as the keeper ends)."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._loop = None
        self._gone()

    def end(self, timeout: float) -> None:
        """Stop the keeper: shut the socket's sending side, on which it SIGKILLs what it
        started, says ``ended``, reaps it and exits; returns at ``ended`` (or the socket's end),
        without waiting for those exits or the kernel's teardown of the sandbox's namespaces
        and mounts (:meth:`wait`). SIGKILL after ``timeout``. Blocking (on a thread), after
        :meth:`detach`."""
        try:
            self._sock.setblocking(True)
            self._sock.settimeout(timeout)
            self._sock.shutdown(socket.SHUT_WR)
            buf = bytes(self._buf)
            while b'"ended": true' not in buf:  # exit statuses before it: not wanted now
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buf = buf[-64:] + chunk
        except OSError:  # TimeoutError included: a keeper that does not end is killed
            self.kill()
        finally:
            self._sock.close()

    def wait(self, timeout: float) -> None:
        """Until the keeper has exited (its mount namespace gone); SIGKILL after ``timeout``."""
        if not select.select([self._pidfd], [], [], timeout)[0]:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            select.select([self._pidfd], [], [], 5)
        os.close(self._pidfd)
        self._pidfd = -1

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


def bwrap_path() -> str:
    prog = shutil.which("bwrap")
    if prog is None:
        raise SandboxError("bwrap (bubblewrap) not found on the host")
    return prog

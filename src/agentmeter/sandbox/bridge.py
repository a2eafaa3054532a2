"""Expose host Unix sockets inside a sandbox's network namespace as 127.0.0.1:PORT.

A sandbox with no network cannot reach the host's loopback. The bridge is a small host process
started *inside the sandbox's network namespace* (``nsenter -n``) but still in the host's mount
namespace, so it can listen on the sandbox's 127.0.0.1 and connect to the host's Unix socket. No
program is needed inside the sandbox. It exits when its stdin closes (its owner died or stopped).

One bridge runs per sandbox for the sandbox's whole life, so it is kept small: the interpreter
starts isolated and without ``site`` (``python -I -S``) and runs :data:`BRIDGE_MAIN`, a
``selectors`` loop using only ``socket``/``selectors``/``sys``: no asyncio, no agentmeter, no
pydantic (≈ 4 MB PSS each instead of ≈ 21 MB; at 64 concurrent trials that is 1 GB less). Each
bridge is its own process, so the gateway's per-client connection cap (by peer PID) stays per
sandbox.

Run as: ``python -I -S -c BRIDGE_MAIN PORT=SOCKET_PATH [PORT=SOCKET_PATH ...]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence

from agentmeter.sandbox.spec import ExposedSocket, SandboxError

#: the bridge program; stdlib ``socket``/``selectors``/``sys`` only (see the module's doc)
BRIDGE_MAIN = r"""
import selectors, socket, sys
sel = selectors.DefaultSelector()
R, W = selectors.EVENT_READ, selectors.EVENT_WRITE

class End:
    # one socket of a connection: its peer, the bytes waiting to be sent to it, its state
    def __init__(self, sock):
        self.sock, self.peer, self.out, self.eof_in, self.shut = sock, None, b"", False, False
        sock.setblocking(False)
        sel.register(sock, R, self)

    def want(self):
        if self.sock.fileno() < 0:
            return
        ev = (R if not self.eof_in and not self.peer.out else 0) | (W if self.out else 0)
        try:
            if ev:
                sel.modify(self.sock, ev, self)
            else:
                sel.unregister(self.sock)
        except (KeyError, ValueError):
            if ev:
                sel.register(self.sock, ev, self)

    def close(self):
        for e in (self, self.peer):
            try:
                sel.unregister(e.sock)
            except (KeyError, ValueError):
                pass
            e.sock.close()

    def readable(self):
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            return self.close()
        if not data:
            self.eof_in = True
        else:
            self.peer.out += data
            self.peer.flush()
        self.settle()

    def flush(self):
        if self.out:
            try:
                n = self.sock.send(self.out)
            except BlockingIOError:
                n = 0
            except OSError:
                return self.close()
            self.out = self.out[n:]

    def settle(self):
        a, b = self, self.peer
        if a.sock.fileno() < 0 or b.sock.fileno() < 0:
            return
        for x, y in ((a, b), (b, a)):  # x's input ended and all of it reached y: y's output ends
            if x.eof_in and not y.out and not y.shut:
                y.shut = True
                try:
                    y.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if a.shut and b.shut:
            return self.close()
        a.want()
        b.want()

def accept(listener, path):
    try:
        client, _ = listener.accept()
    except OSError:
        return
    up = socket.socket(socket.AF_UNIX)
    up.settimeout(5)  # a full backlog at the gateway: wait a little, then give up
    try:
        up.connect(path)
    except OSError:
        client.close()
        up.close()
        return
    c, u = End(client), End(up)
    c.peer, u.peer = u, c

for arg in sys.argv[1:]:
    port, _, path = arg.partition("=")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        ls.bind(("127.0.0.1", int(port)))
        ls.listen(128)
    except OSError as e:
        sys.stderr.write(f"bridge: {e}\n")
        sys.exit(1)
    ls.setblocking(False)
    sel.register(ls, R, (ls, path))
sel.register(sys.stdin.fileno(), R, None)  # stdin EOF: the owner is gone
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    for key, ev in sel.select():
        d = key.data
        if d is None:
            sys.exit(0)
        if isinstance(d, tuple):
            accept(*d)
            continue
        if d.sock.fileno() < 0:
            continue
        if ev & W:
            d.flush()
            if d.sock.fileno() >= 0:
                d.settle()
        if ev & R and d.sock.fileno() >= 0:
            d.readable()
"""


#: how long ``stop`` waits for the bridge to leave on its own before killing it
STOP_WAIT_S = 2.0


class BridgeProcess:
    """A running bridge; ``stop`` ends it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def stop(self) -> None:
        """End the bridge; never raises (a starved machine: the bridge may leave between the
        wait's timeout and the kill, which then finds no process)."""
        if self.proc.returncode is None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_WAIT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()


async def start_bridge(netns_pid: int, sockets: Sequence[ExposedSocket], *,
                       enter_userns: bool = False) -> BridgeProcess:
    """Start a bridge in the network namespace of ``netns_pid``."""
    cmd = ["nsenter", "-t", str(netns_pid), "-n"]
    if enter_userns:
        cmd[3:3] = ["-U", "--preserve-credentials"]
    cmd += [sys.executable, "-I", "-S", "-c", BRIDGE_MAIN]
    cmd += [f"{s.port}={s.host_path}" for s in sockets]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        start_new_session=True)
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if line.strip() != b"ready":
        err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
        await BridgeProcess(proc).stop()
        raise SandboxError(f"socket bridge failed to start: {err.strip() or line!r}")
    return BridgeProcess(proc)


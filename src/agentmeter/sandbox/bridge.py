"""Expose host Unix sockets inside a sandbox's network namespace as 127.0.0.1:PORT.

A sandbox with no network cannot reach the host's loopback. The bridge is a small host process
started *inside the sandbox's network namespace* (``nsenter -n``) but still in the host's mount
namespace, so it can listen on the sandbox's 127.0.0.1 and connect to the host's Unix socket. No
program is needed inside the sandbox. It exits when its stdin closes (its owner died or stopped).

Run as: ``python -m agentmeter.sandbox.bridge PORT=SOCKET_PATH [PORT=SOCKET_PATH ...]``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence

from agentmeter.sandbox.spec import ExposedSocket, SandboxError


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


def _handler(socket_path: str):  # type: ignore[no-untyped-def]
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_unix_connection(socket_path)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))
        cw.close()
        uw.close()

    return handle


async def _serve(pairs: list[tuple[int, str]]) -> None:
    servers = [await asyncio.start_server(_handler(path), "127.0.0.1", port) for port, path in pairs]
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    # stdin EOF = the owner is gone
    await loop.run_in_executor(None, sys.stdin.buffer.read)
    for s in servers:
        s.close()


def main(argv: Sequence[str]) -> None:
    pairs = []
    for arg in argv:
        port, _, path = arg.partition("=")
        pairs.append((int(port), path))
    try:
        asyncio.run(_serve(pairs))
    except OSError as e:
        sys.stderr.write(f"bridge: {e}\n")
        sys.exit(1)


class BridgeProcess:
    """A running bridge; ``stop`` ends it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def stop(self) -> None:
        if self.proc.returncode is None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 2)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def start_bridge(netns_pid: int, sockets: Sequence[ExposedSocket], *,
                       enter_userns: bool = False) -> BridgeProcess:
    """Start a bridge in the network namespace of ``netns_pid``."""
    cmd = ["nsenter", "-t", str(netns_pid), "-n"]
    if enter_userns:
        cmd[3:3] = ["-U", "--preserve-credentials"]
    cmd += [sys.executable, "-m", "agentmeter.sandbox.bridge"]
    cmd += [f"{s.port}={s.host_path}" for s in sockets]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
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


if __name__ == "__main__":
    main(sys.argv[1:])

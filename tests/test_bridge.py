"""The socket bridge (sandbox/bridge.py) on its own, in the test process's own network
namespace (no sandbox needed): bytes both ways, half-close, many connections at once, its exit
when stopped, and its size (one runs per sandbox: at 64 concurrent trials an interpreter with
asyncio and pydantic loaded cost ≈ 1 GB more)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from agentmeter.sandbox import bridge as bridge_mod
from agentmeter.sandbox.bridge import BridgeProcess, start_bridge
from agentmeter.sandbox.spec import ExposedSocket, SandboxError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _bridge_on_a_free_port(path: Path) -> tuple[BridgeProcess, int]:
    """A bridge in this process's network namespace exposing ``path`` on a port that was free:
    the port is released before the bridge binds it, so another process may take it between;
    then another port is tried."""
    for attempt in range(5):
        port = _free_port()
        try:
            return await start_bridge(os.getpid(), (ExposedSocket(host_path=path, port=port),)), port
        except SandboxError as e:
            if "in use" not in str(e) or attempt == 4:
                raise
    raise AssertionError("unreachable")


async def _echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    data = await r.read()  # to the client's EOF (its half-close), then all of it back
    w.write(data[::-1])
    await w.drain()
    w.close()


async def test_bridge_carries_bytes_both_ways_and_stays_small() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ambr-"))
    path = tmp / "gw.sock"
    server = await asyncio.start_unix_server(_echo, path=str(path))
    bridge, port = await _bridge_on_a_free_port(path)
    try:
        payloads = [os.urandom(n) for n in (1, 70_000, 1_500_000, *[1000] * 20)]

        async def roundtrip(data: bytes) -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(data)
            await w.drain()
            w.write_eof()
            got = await r.read()
            w.close()
            return got

        got = await asyncio.gather(*(roundtrip(p) for p in payloads))
        assert [g == p[::-1] for g, p in zip(got, payloads, strict=True)] == [True] * len(payloads)
        pid = bridge.proc.pid
        maps = Path(f"/proc/{pid}/maps").read_text()
        # the bridge is `python -I -S` with socket/selectors only: no asyncio, no pydantic
        assert "_asyncio" not in maps and "pydantic" not in maps
        status = dict(line.split(":", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines())
        assert int(status["RssAnon"].split()[0]) < 10_000, status["RssAnon"]  # kB; was ≈ 19,500
    finally:
        await bridge.stop()
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    assert bridge.proc.returncode is not None


async def test_bridge_closes_a_client_when_the_socket_is_gone() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ambr-"))
    bridge, port = await _bridge_on_a_free_port(tmp / "none.sock")
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(r.read(), 10) == b""
        w.close()
    finally:
        await bridge.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class _LeftOnItsOwn:
    """A bridge process that leaves between stop's wait timing out and its kill."""

    returncode: int | None = None
    stdin = None

    async def wait(self) -> int:
        if self.returncode is None:
            await asyncio.sleep(3600)  # never on its own, within the wait
        return 0

    def kill(self) -> None:
        self.returncode = 0
        raise ProcessLookupError  # what asyncio's transport raises for a process already gone


async def test_stop_never_raises_when_the_bridge_left_before_the_kill(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a starved machine (64 trials on 2 cores) a bridge took longer than the wait to
    leave, then was gone by the kill: ProcessLookupError ended the whole run."""
    monkeypatch.setattr(bridge_mod, "STOP_WAIT_S", 0.01)
    await bridge_mod.BridgeProcess(_LeftOnItsOwn()).stop()  # type: ignore[arg-type]

"""A load generator and an upstream for ``benchmarks/gateway.py`` cheap enough not to be the
bound: raw keep-alive sockets with a prebuilt request (no HTTP library), and a minimal
raw-socket upstream answering every POST with one prebuilt Chat Completions reply (with usage,
so the gateway meters and prices it as a real call). With them the gateway's own ceiling is what
a throughput pass measures, not the benchmark's client or upstream (``raw_*`` in its JSON).

Neither is a general HTTP implementation: requests and replies are read by ``Content-Length``
(or a chunked body's last chunk), keep-alive only, HTTP/1.1, loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import socket
import time
from typing import Any

REPLY_BODY = json.dumps({
    "id": "chatcmpl-raw", "object": "chat.completion", "created": 0, "model": "raw",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "y" * 600},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 250, "completion_tokens": 150, "total_tokens": 400}}).encode()
REPLY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
         + str(len(REPLY_BODY)).encode() + b"\r\n\r\n" + REPLY_BODY)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _length(head: bytes) -> int | None:
    """The Content-Length of a header block, None if chunked (or absent)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return None


class _UpstreamProtocol(asyncio.Protocol):
    """Every complete request (headers + Content-Length body) gets ``REPLY``."""

    def __init__(self) -> None:
        self.buf = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            need = end + 4 + (_length(self.buf[:end]) or 0)
            if len(self.buf) < need:
                return
            self.buf = self.buf[need:]
            self.transport.write(REPLY)


def serve_raw_upstream(q: Any) -> None:
    """The raw upstream in this process (uvloop's loop when installed): puts its port on ``q``."""
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            _UpstreamProtocol, "127.0.0.1", 0)
        q.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


def request_bytes(port: int, path: str, token: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _drive(port: int, request: bytes, n: int, conns: int) -> tuple[int, int]:
    """``n`` requests over ``conns`` keep-alive connections (each sends its next request when
    its reply is complete): (replies with status 200, other replies)."""
    sel = selectors.DefaultSelector()
    bufs: dict[socket.socket, bytes] = {}
    left = n
    ok = bad = 0
    for _ in range(min(conns, n)):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, s)
        bufs[s] = b""
        s.sendall(request)
        left -= 1
    while ok + bad < n:
        for key, _ in sel.select():
            s = key.data
            data = s.recv(262144)
            if not data:
                raise ConnectionError("the server closed a keep-alive connection")
            buf = bufs[s] + data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = _length(buf[:end])
                if length is None:  # chunked: up to the last chunk
                    last = buf.find(b"\r\n0\r\n\r\n", end)
                    if last < 0:
                        break
                    need = last + 7
                else:
                    need = end + 4 + length
                    if len(buf) < need:
                        break
                if buf[9:12] == b"200":
                    ok += 1
                else:
                    bad += 1
                buf = buf[need:]
                if left > 0:
                    left -= 1
                    s.sendall(request)
            bufs[s] = buf
    for s in bufs:
        sel.unregister(s)
        s.close()
    return ok, bad


def client_process(port: int, path: str, token: str, body: bytes, conns: int,
                   jobs: Any, results: Any) -> None:
    """A load process: for each ``n`` from ``jobs`` (None ends it) drives ``n`` requests and
    puts (ok, bad, wall s, this process's CPU s) on ``results``."""
    request = request_bytes(port, path, token, body)
    while (n := jobs.get()) is not None:
        c0, t0 = time.process_time(), time.perf_counter()
        ok, bad = _drive(port, request, n, conns)
        results.put((ok, bad, time.perf_counter() - t0, time.process_time() - c0))


class RawLoad:
    """``clients`` load processes of ``conns`` connections each against ``port``/``path``."""

    def __init__(self, ctx: Any, port: int, path: str, token: str, body: bytes,
                 clients: int, conns: int) -> None:
        self.jobs = [ctx.Queue() for _ in range(clients)]
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=client_process, daemon=True,
                                  args=(port, path, token, body, conns, j, self.results))
                      for j in self.jobs]
        for p in self.procs:
            p.start()

    def run(self, n: int, pids: dict[str, int]) -> dict[str, float]:
        """``n`` requests split over the processes: requests/s, CPU ms per request of each
        process in ``pids`` and of the load processes together (``client``), and the replies
        that were not 200 (``errors``)."""
        share = n // len(self.jobs)
        c0 = {name: cpu_s(pid) for name, pid in pids.items()}
        t0 = time.perf_counter()
        for j in self.jobs:
            j.put(share)
        got = [self.results.get(timeout=600) for _ in self.jobs]
        wall = time.perf_counter() - t0
        done = share * len(self.jobs)
        out = {f"{name}_cpu_ms": (cpu_s(pid) - c0[name]) * 1000 / done
               for name, pid in pids.items()}
        out["client_cpu_ms"] = sum(g[3] for g in got) * 1000 / done
        out["rps"] = done / wall
        out["errors"] = float(sum(g[1] for g in got))
        return out

    def close(self) -> None:
        for j in self.jobs:
            j.put(None)
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()

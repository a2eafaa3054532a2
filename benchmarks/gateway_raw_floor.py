"""The floor of a gateway in Python without aiohttp: how much CPU per request a design on raw
asyncio protocols needs for the gateway's essential work (issue 30: is 5,000 requests/s with
every call durable within reach of a Python gateway on this 2-core VM?). Benchmark only: not
the gateway, no bounds beyond a body limit and a token check, no translation, one wire shape.

The prototype (``serve_raw_gateway``) is an ``asyncio.Protocol`` HTTP/1.1 server whose requests
are parsed by ``httptools`` (the C parser uvicorn uses; ``pip install httptools``, not a
dependency of agentmeter), and a pool of raw keep-alive connections to the upstream, its replies
parsed by ``httptools`` too. Per call it does what the gateway must: parse the request's JSON,
check its token, re-serialize the body for the upstream (model replaced), forward it, parse the
reply's JSON and read its usage, price it, build the call's row (a tuple, no pydantic), hand the
row to a writer thread that group-commits to SQLite (WAL, ``synchronous=NORMAL``, as the store)
and wakes the loop once per batch; the client's reply is written only when its row is committed.
No coroutines or tasks: each step is a callback.

Against the same raw load and raw upstream as ``benchmarks/gateway.py``'s raw-load passes
(``gateway_load``), one run, targets alternating pass by pass: the real gateway (every call
stored), the bare aiohttp proxy (``gateway_servers.serve_floor``), the prototype with ``json`` and,
when installed, with ``orjson``, and with ``--no-store-too`` the prototype storing nothing.
Prints CPU ms per request of each server (``/proc/<pid>/stat`` over its timed passes), its
requests/s, its ceiling on a core of its own (1000 ÷ CPU ms), and with ``--pairs`` the added
latency p50 of each (one connection, one request at a time, direct and through each target in
turn); the final line is JSON.

    python benchmarks/gateway_raw_floor.py [--requests 4000] [--rounds 3] [--pairs 1000]
                                           [--no-store-too] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import socket
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_load import request_bytes  # noqa: E402
from gateway_servers import (  # noqa: E402
    BODY,
    CHAT_PATH,
    Servers,
    run_passes,
    stored_calls,
    summarize,
)

#: per-million-token prices of the prototype's one model (input, output)
PRICE_IN, PRICE_OUT = 3.0, 15.0
MAX_BODY = 32 * 1024 * 1024
COLUMNS = ("run_id", "trial_id", "try_number", "seq", "wire_api", "client_api", "model",
           "upstream_model", "status_code", "stream", "started_at", "latency_s", "ttft_s",
           "input_tokens", "output_tokens", "cost_usd", "bytes_in", "bytes_out", "error",
           "scripted", "purpose")
INSERT = (f"INSERT OR REPLACE INTO model_calls ({', '.join(COLUMNS)}) "
          f"VALUES ({', '.join('?' * len(COLUMNS))})")


def _codec(name: str) -> tuple[Any, Any]:
    """(loads, dumps to bytes) of ``json`` or ``orjson``."""
    if name == "orjson":
        import orjson

        return orjson.loads, orjson.dumps
    return json.loads, lambda obj: json.dumps(obj).encode()


class _Writer:
    """Rows queued by the loop, group-committed by one thread; each batch's callbacks run on
    the loop (one wake-up per batch) after its commit."""

    def __init__(self, path: str | None, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.turn: list[tuple[tuple[Any, ...], Any]] = []
        self.queue: list[tuple[tuple[Any, ...], Any]] = []
        self.cond = threading.Condition(threading.Lock())
        self.path = path
        self.batches = self.rows = 0
        if path is not None:
            threading.Thread(target=self._run, daemon=True).start()

    def submit(self, row: tuple[Any, ...], done: Any) -> None:
        if self.path is None:
            done()
            return
        self.turn.append((row, done))
        if len(self.turn) == 1:  # hand the turn's rows over at its end: one notify per turn
            self.loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        jobs, self.turn = self.turn, []
        with self.cond:
            self.queue.extend(jobs)
            self.cond.notify()

    def _run(self) -> None:
        assert self.path is not None
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute(f"CREATE TABLE IF NOT EXISTS model_calls ({', '.join(COLUMNS)}, "
                   "PRIMARY KEY (run_id, trial_id, try_number, seq))")
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                batch, self.queue = self.queue, []
            db.execute("BEGIN IMMEDIATE")
            db.executemany(INSERT, [row for row, _ in batch])
            db.execute("COMMIT")
            self.batches += 1
            self.rows += len(batch)
            self.loop.call_soon_threadsafe(_release, [done for _, done in batch])


def _release(dones: list[Any]) -> None:
    for done in dones:
        done()


class _Upstream(asyncio.Protocol):
    """One kept-alive connection to the upstream; one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        import httptools

        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.body: list[bytes] = []
        self.done: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pool.give_back(self)  # a request waiting for it, else idle

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        done, self.done = self.done, None
        body, self.body = b"".join(self.body), []
        status = self.parser.get_status_code()
        self.pool.give_back(self)
        done(status, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)


class _Pool:
    """Kept-alive upstream connections: an idle one per request, a new one when none is idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int) -> None:
        self.loop, self.port = loop, port
        self.idle: list[_Upstream] = []
        self.waiting: collections.deque[tuple[bytes, Any]] = collections.deque()
        self.opening = 0

    def send(self, request: bytes, done: Any) -> None:
        if self.idle:
            conn = self.idle.pop()
            conn.done = done
            conn.transport.write(request)
            return
        self.waiting.append((request, done))
        self.opening += 1
        self.loop.create_task(self._open())

    async def _open(self) -> None:
        try:
            await self.loop.create_connection(lambda: _Upstream(self), "127.0.0.1", self.port)
        finally:
            self.opening -= 1

    def give_back(self, conn: _Upstream) -> None:
        if self.waiting:
            request, conn.done = self.waiting.popleft()
            conn.transport.write(request)
        else:
            self.idle.append(conn)

    def lost(self, conn: _Upstream) -> None:
        if conn in self.idle:
            self.idle.remove(conn)


class _Client(asyncio.Protocol):
    """One client connection: requests parsed by httptools, each answered when stored."""

    def __init__(self, gw: _Gateway) -> None:
        import httptools

        self.gw = gw
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.body: list[bytes] = []
        self.size = 0
        self.token = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:
            self.transport.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"authorization":
            self.token = value[7:]

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > MAX_BODY:
            raise ValueError("body too large")
        self.body.append(body)

    def on_message_complete(self) -> None:
        raw, self.body, self.size = b"".join(self.body), [], 0
        self.gw.call(self, raw)

    def reply(self, status: int, body: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n" % (status, len(body)) + body)


class _Gateway:
    def __init__(self, loop: asyncio.AbstractEventLoop, upstream_port: int, codec: str,
                 store: str | None) -> None:
        self.loads, self.dumps = _codec(codec)
        self.pool = _Pool(loop, upstream_port)
        self.writer = _Writer(store, loop)
        self.token = b"raw-floor-token"
        self.seq = 0
        self.in_flight = 0
        self.head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{upstream_port}\r\n"
                     "Content-Type: application/json\r\nAccept: application/json\r\n"
                     "Authorization: Bearer sk-upstream\r\n").encode()

    def call(self, client: _Client, raw: bytes) -> None:
        if client.token != self.token:
            client.reply(401, b'{"error":{"message":"invalid token"}}')
            return
        try:
            body = self.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            client.reply(400, b'{"error":{"message":"not a chat request"}}')
            return
        t0 = time.perf_counter()
        started = datetime.now(UTC)
        self.seq += 1
        seq = self.seq
        model = str(body.get("model") or "")
        body["model"] = "raw"
        data = self.dumps(body)
        self.in_flight += 1

        def answered(status: int, reply: bytes) -> None:
            usage: Any = None
            if status == 200:
                try:
                    obj = self.loads(reply)
                except ValueError:
                    obj = None
                usage = obj.get("usage") if isinstance(obj, dict) else None
            tokens_in = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            tokens_out = usage.get("completion_tokens") if isinstance(usage, dict) else None
            cost = (tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1e6 \
                if isinstance(tokens_in, int) and isinstance(tokens_out, int) else None
            row = ("bench", "bench-raw", 0, seq, "chat", "chat", model, "raw", status, 0,
                   started.isoformat(), time.perf_counter() - t0, None, tokens_in, tokens_out,
                   cost, len(raw), len(reply), None if status == 200 else f"upstream {status}",
                   0, "agent")

            def stored() -> None:
                self.in_flight -= 1
                client.reply(status, reply)

            self.writer.submit(row, stored)

        self.pool.send(self.head + b"Content-Length: %d\r\n\r\n" % len(data) + data, answered)


def serve_raw_gateway(q: Any, upstream_port: int, codec: str, store: str | None) -> None:
    """The prototype in this process: puts (port, pid) on ``q``."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gw = _Gateway(loop, upstream_port, codec, store)
        server = await loop.create_server(lambda: _Client(gw), "127.0.0.1", 0)
        q.put((server.sockets[0].getsockname()[1], os.getpid()))
        await asyncio.Event().wait()

    asyncio.run(main())


def _pairs(targets: dict[str, tuple[int, str]], raw_port: int, body: bytes,
           n: int) -> dict[str, float]:
    """Added latency p50 (ms) of each target over the direct upstream: one connection each,
    one request at a time, direct and each target in turn, ``n`` rounds."""
    def conn(port: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def once(s: socket.socket, request: bytes) -> float:
        t0 = time.perf_counter()
        s.sendall(request)
        buf = b""
        while True:
            buf += s.recv(65536)
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end].lower()
                i = head.find(b"content-length:")
                length = int(head[i + 15:].split(b"\r\n", 1)[0])
                if len(buf) >= end + 4 + length:
                    return time.perf_counter() - t0

    direct = (conn(raw_port), request_bytes(raw_port, CHAT_PATH, "direct", body))
    via = {name: (conn(port), request_bytes(port, CHAT_PATH, token, body))
           for name, (port, token) in targets.items()}
    added: dict[str, list[float]] = {name: [] for name in targets}
    for i in range(n + 50):
        d = once(*direct)
        for name, (s, req) in via.items():
            t = once(s, req)
            if i >= 50:
                added[name].append((t - d) * 1000)
    for s, _ in (direct, *via.values()):
        s.close()
    return {name: sorted(xs)[len(xs) // 2] for name, xs in added.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=4000, help="requests per pass")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=0,
                    help="added-latency rounds (one request at a time; 0: none)")
    ap.add_argument("--no-store-too", action="store_true",
                    help="also the prototype storing nothing (json)")
    ap.add_argument("--no-gateway", action="store_true",
                    help="not the real gateway nor the aiohttp proxy: the prototypes only")
    args = ap.parse_args()
    try:
        import httptools  # noqa: F401
    except ImportError:
        sys.exit("httptools is not installed: pip install httptools")
    codecs = ["json"]
    try:
        import orjson  # noqa: F401
        codecs.append("orjson")
    except ImportError:
        pass
    targets: dict[str, tuple[int, int, str]] = {}  # name: (port, pid, token)
    stores: dict[str, str] = {}
    with Servers() as s:
        raw_port, raw_pid = s.raw_upstream()
        if not args.no_gateway:
            gw_store = os.path.join(s.tmp.name, "gateway")
            os.mkdir(gw_store)
            port, token, gw_pid = s.gateway(raw_port, gw_store, args.connections)
            targets["gateway"] = (port, gw_pid, token)
            fport, fpid = s.floor("proxy_raw", raw_port)
            targets["aiohttp_proxy"] = (fport, fpid, "x")
        variants = [(f"raw_floor_{c}", c, True) for c in codecs]
        if args.no_store_too:
            variants.append(("raw_floor_json_no_store", "json", False))
        for name, codec, stored in variants:
            where = os.path.join(s.tmp.name, f"{name}.db") if stored else None
            s.start(serve_raw_gateway, s.q, raw_port, codec, where)
            port, pid = s.q.get(timeout=60)
            targets[name] = (port, pid, "raw-floor-token")
            if where is not None:
                stores[name] = where
        loads = {name: (s.raw_load(port, token, 1, args.connections),
                        {"server": pid, "upstream": raw_pid})
                 for name, (port, pid, token) in targets.items()}
        loads["direct"] = (s.raw_load(raw_port, "direct", 1, args.connections),
                           {"upstream": raw_pid})
        warm = max(args.requests // 4, args.connections)
        got = run_passes(loads, args.requests, args.rounds, warm)
        served = dict.fromkeys(loads, warm + args.rounds * args.requests)
        out: dict[str, Any] = {"benchmark": "gateway_raw_floor", "cpus": os.cpu_count(),
                               "python": sys.version.split()[0], "parser": "httptools",
                               "requests": args.requests, "rounds": args.rounds,
                               "connections": args.connections}
        for name, runs in got.items():
            out.update(summarize(name, runs, ceiling=name != "direct"))
        if args.pairs:
            added = _pairs({name: (port, token) for name, (port, _, token) in targets.items()},
                           raw_port, json.dumps(BODY).encode(), args.pairs)
            for name, ms in added.items():
                out[f"{name}_added_p50_ms"] = round(ms, 3)
            for name in targets:
                served[name] += args.pairs + 50
        s.stop()
        for name, where in stores.items():
            with sqlite3.connect(where) as db:
                out[f"{name}_stored_calls"] = db.execute(
                    "SELECT count(*) FROM model_calls").fetchone()[0]
            out[f"{name}_served_calls"] = served[name]
        if "gateway" in targets:
            out["gateway_stored_calls"] = stored_calls(gw_store)
            out["gateway_served_calls"] = served["gateway"]
        out["targets"] = {"gateway_rps": 5000, "added_p50_ms": 0.5}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

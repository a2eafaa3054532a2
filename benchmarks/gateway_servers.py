"""What the gateway benchmarks share (``gateway.py``, its raw-load passes, ``gateway_ab.py``,
``gateway_raw_floor.py``, ``gateway_path.py``): the request body, the server processes (a
gateway storing every call, the bare aiohttp floors), their start-up and teardown
(:class:`Servers`), the raw-load passes taken in turn and their summary."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import aiohttp
from gateway_load import RawLoad, serve_raw_upstream

# the source tree's agentmeter, not an installed one (the spawned processes inherit the path)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: the raw load's path (Chat Completions)
CHAT_PATH = "/v1/chat/completions"
BODY = {"model": "any", "messages": [
    {"role": "system", "content": "You are a coding agent. " * 40},
    {"role": "user", "content": "Fix the failing test in app.py"}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]}


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def run_loop(main: Any, loop: str) -> None:
    """``main()`` on asyncio's own event loop, or on uvloop's (``--loop uvloop``: optional)."""
    if loop == "uvloop":
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        uvloop.run(main())
    else:
        asyncio.run(main())


def serve_gateway(q: Any, upstream_port: int, store_dir: str | None, conc: int,
                  ctl: Any, loop: str = "asyncio", thread_commits: bool = False,
                  switch_ms: float | None = None, raw_port: int = 0) -> None:
    """A gateway in this process, storing every call in a SQLite store in ``store_dir`` (None:
    no sink): puts (port, the tokens of its trials ``bench/up``, in-process scripted,
    ``bench/gemini`` and ``bench/raw``, pid) on ``q``, then the writer's (batches, calls, calls
    committed on the loop) on ``q`` for each message on ``ctl``."""
    from agentmeter.gateway import Gateway, ModelRegistry, UpstreamModel
    from agentmeter.gateway.bounds import GatewayLimits
    from agentmeter.gateway.metering import StoreSink
    from agentmeter.pricing import PriceBook
    from agentmeter.records import RunRecord
    from agentmeter.store.db import Store

    if switch_ms is not None:  # --switch-interval: how long a thread may hold the GIL
        sys.setswitchinterval(switch_ms / 1000)
    sink: StoreSink | None = None
    if store_dir is not None:  # as the runner wires it (runner/trial.py: _call_sink)
        store = Store.open(store_dir)
        store.create_run(RunRecord(id="bench", backend="local", attempts=1, concurrency=1))
        sink = StoreSink(store, "bench", 0)

    async def main() -> None:
        models = ModelRegistry({"bench/up": UpstreamModel(
            name="bench/up", base_url=f"http://127.0.0.1:{upstream_port}/v1", wire_api="chat",
            price_key="scripted/bench"), "bench/gemini": UpstreamModel(
            name="bench/gemini", base_url=f"http://127.0.0.1:{upstream_port}/v1beta",
            wire_api="gemini", price_key="scripted/bench"), "bench/raw": UpstreamModel(
            name="bench/raw", base_url=f"http://127.0.0.1:{raw_port}/v1", wire_api="chat",
            price_key="scripted/bench")})
        # a trial's requests in flight are bounded (16 by default): the load's are allowed
        gw = Gateway(models, PriceBook(), limits=GatewayLimits(max_in_flight=max(16, conc)))
        if thread_commits:  # every call to the writer thread, a lone one too (before 11-29)
            gw._writer._lone = None
        await gw.start(host="127.0.0.1", port=0)
        q.put((gw.port, gw.open_trial("bench", "bench/up", sink=sink),
               gw.open_trial("bench-inproc", "scripted/explorer-1000", sink=sink),
               gw.open_trial("bench-gemini", "bench/gemini", sink=sink),
               gw.open_trial("bench-raw", "bench/raw", sink=sink), os.getpid()))
        while True:  # each message asks for the writer's (batches, calls, on the loop) so far
            await asyncio.to_thread(ctl.get)
            q.put((*gw.commits, gw._writer.on_loop))

    run_loop(main, loop)


def serve_gateway_from(src: str, *args: Any) -> None:
    """:func:`serve_gateway` with agentmeter imported from ``src`` (another version's tree)."""
    sys.path.insert(0, src)
    for name in [m for m in sys.modules if m == "agentmeter" or m.startswith("agentmeter.")]:
        del sys.modules[name]
    import agentmeter

    assert Path(agentmeter.__file__).resolve().is_relative_to(Path(src).resolve())
    serve_gateway(*args)


def serve_floor(q: Any, kind: str, upstream_port: int, loop: str = "asyncio") -> None:
    """The floor of a gateway on aiohttp, same client: ``hello``, a bare aiohttp server that
    reads the body and answers a fixed reply of the upstream's size; ``proxy``, a bare aiohttp
    proxy (read the body, post it to the upstream on a kept-alive session, return its reply:
    no parsing, metering, storing or bounds)."""
    from aiohttp import web

    reply = json.dumps({"id": "x", "choices": [{"message": {"content": "y" * 600}}]}).encode()

    async def main() -> None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        up = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"

        async def hello(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=reply, content_type="application/json")

        async def proxy(request: web.Request) -> web.Response:
            body = await request.read()
            async with session.post(up, data=body, headers={
                    "Content-Type": "application/json"}) as r:
                got = await r.read()
                return web.Response(status=r.status, body=got, content_type="application/json")

        app = web.Application()
        app.router.add_post("/v1/chat/completions", hello if kind == "hello" else proxy)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    run_loop(main, loop)


class Servers:
    """One benchmark run's processes (spawned, daemonic; each puts its port on :attr:`q`), its
    raw loads and a temporary directory, all ended by :meth:`close` (or ``with``)."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.q = self.ctx.Queue()
        #: the raw-load gateways' control queue (kept: a queue collected before the child
        #: starts is gone)
        self.ctl = self.ctx.Queue()
        self.procs: list[BaseProcess] = []
        self.loads: list[RawLoad] = []
        self.tmp = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, target: Any, *args: Any) -> BaseProcess:
        proc = self.ctx.Process(target=target, args=args, daemon=True)
        proc.start()
        self.procs.append(proc)
        return proc

    def raw_upstream(self) -> tuple[int, int]:
        """The raw upstream (``gateway_load``): its (port, pid)."""
        proc = self.start(serve_raw_upstream, self.q)
        return self.q.get(timeout=30), proc.pid or 0

    def gateway(self, raw_port: int, store_dir: str | None, conc: int, loop: str = "asyncio",
                src: str | None = None) -> tuple[int, str, int]:
        """A gateway whose model ``bench/raw`` is the raw upstream, storing every call in
        ``store_dir`` (None: not at all), its code from ``src`` (None: this tree's): its
        (port, that trial's token, pid)."""
        args = (self.q, raw_port, store_dir, conc, self.ctl, loop, False, None, raw_port)
        if src is None:
            self.start(serve_gateway, *args)
        else:
            self.start(serve_gateway_from, src, *args)
        port, _, _, _, token, pid = self.q.get(timeout=60)
        return port, token, pid

    def floor(self, kind: str, upstream_port: int, loop: str = "asyncio") -> tuple[int, int]:
        """A bare aiohttp server (:func:`serve_floor`): its (port, pid)."""
        proc = self.start(serve_floor, self.q, kind, upstream_port, loop)
        return self.q.get(timeout=60), proc.pid or 0

    def raw_load(self, port: int, token: str, clients: int, conns: int) -> RawLoad:
        """The raw load (``clients`` processes of ``conns`` connections) of :data:`BODY` on
        ``port``."""
        load = RawLoad(self.ctx, port, CHAT_PATH, token, json.dumps(BODY).encode(), clients,
                       conns)
        self.loads.append(load)
        return load

    def stop(self) -> None:
        """The processes ended (a store is read after its gateway's end)."""
        for p in self.procs:
            p.terminate()
            p.join(5)

    def close(self) -> None:
        for load in self.loads:
            load.close()
        self.stop()
        self.tmp.cleanup()


def run_passes(loads: dict[Any, tuple[RawLoad, dict[str, int]]], n: int, rounds: int,
               warm: int, alternate: bool = False) -> dict[Any, list[dict[str, float]]]:
    """A warm-up pass of ``warm`` requests of each load, then ``rounds`` rounds of a pass of
    ``n`` requests of each load in turn (``alternate``: each round in the reverse order of the
    one before, so that none always goes first): each load's passes' figures
    (``RawLoad.run`` with the load's pids)."""
    for load, pids in loads.values():  # connections, caches, the store's file
        load.run(warm, pids)
    got: dict[Any, list[dict[str, float]]] = {key: [] for key in loads}
    order = list(loads)
    for i in range(rounds):
        for key in order[::-1] if alternate and i % 2 else order:
            load, pids = loads[key]
            got[key].append(load.run(n, pids))
    return got


def summarize(name: str, runs: list[dict[str, float]], ceiling: bool) -> dict[str, Any]:
    """The medians of one target's passes: ``{name}_rps``, the CPU ms per request of each
    process measured (``{name}_{server,upstream,client}_cpu_ms_per_request``), the replies
    that were not 200 (``{name}_errors``), and with ``ceiling`` what its server's one event
    loop serves on a core of its own (``{name}_ceiling_rps``, 1000 ÷ its CPU ms)."""
    out: dict[str, Any] = {f"{name}_rps": round(median([r["rps"] for r in runs]), 1)}
    for who in ("server", "upstream", "client"):
        if f"{who}_cpu_ms" in runs[0]:
            out[f"{name}_{who}_cpu_ms_per_request"] = round(
                median([r[f"{who}_cpu_ms"] for r in runs]), 4)
    out[f"{name}_errors"] = int(sum(r["errors"] for r in runs))
    if ceiling:
        out[f"{name}_ceiling_rps"] = round(
            1000 / max(out[f"{name}_server_cpu_ms_per_request"], 1e-6), 1)
    return out


def stored_calls(store_dir: str) -> int:
    """The calls a gateway's store holds (to check against the calls served)."""
    from agentmeter.store.db import Store

    with Store.open(store_dir) as st:
        return len(st.model_calls("bench"))

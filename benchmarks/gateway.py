"""Gateway overhead: added latency and time to first chunk vs calling the upstream directly.

Three processes: the scripted model served stand-alone over loopback HTTP (the upstream), the
gateway proxying to it, and this load generator. Prints a final JSON line. Chat Completions
pairs first, then Gemini pairs (``generateContent`` and ``streamGenerateContent?alt=sse``, a
Gemini-speaking upstream: the ``gemini_*`` figures).

As in a run, the gateway stores every call as it completes (its trials' sinks write to a SQLite
store in a temporary directory) before the client sees the end of the response; ``--no-store``
measures the gateway without it. Since group commit the calls that finish together are
committed in one transaction (``gateway.persist``); ``store_*_cpu_ms`` compare the store's CPU
per call one per transaction and 32 per transaction. ``gateway_cpu_ms_per_request`` is the
gateway process's CPU per request under the throughput load: on a machine shared with other
work, requests/s follows that work, the CPU per request much less.

A lone call (no other under way) is committed on the gateway's event loop when SQLite's write
lock is free, other calls on the writer thread (``gateway.persist``); ``--thread-commits``
sends every call to the thread, as before, for an A/B; ``*_committed_on_loop`` give the share
of calls committed on the loop in the latency pairs and under the throughput load.

``--floor`` adds the floor of a gateway on aiohttp with the same client: a bare aiohttp server
(``floor_hello_*``) and a bare aiohttp proxy to the same upstream (``floor_proxy_*``; without
``--throughput-only`` also its added latency, ``floor_proxy_added_p50_ms``: the least a proxy
on aiohttp adds on this machine, its pairs interleaved round by round with pairs through the
gateway, ``interleaved_gateway_added_p50_ms``, so the two compare in one run;
``--compare-commits`` adds two more gateways to that interleave, one with ``--thread-commits``
and one with ``--no-store``: ``interleaved_{thread_commits,no_store}_gateway_*``). Every
throughput pass also reports the load generator's and the upstream's CPU per request:
``machine_ceiling_rps`` is what the three processes' CPU per request leaves of this machine's
cores. ``--loop uvloop`` runs the gateway (and the floor servers) on uvloop, if installed;
``--compare-loops`` adds the same gateway on the other loop to the interleaved latency pairs.

The aiohttp load generator above costs more CPU per request than a bare aiohttp server, and the
scripted upstream about as much: on 2 cores they, not the gateway, bound its throughput. The
raw-load passes (``raw_*``; ``gateway_load``) measure the gateway's own ceiling instead: a load
of raw keep-alive sockets sending one prebuilt request (``--raw-clients`` processes of
``--raw-connections`` each; ≈ 0.06–0.08 ms of CPU per request) against a gateway whose model is
a raw-socket upstream answering one prebuilt Chat Completions reply with usage (≈ 0.05 ms), every
call stored as in a run (``raw_gateway_*_stored_calls`` against ``*_served_calls``). One gateway
per event loop in ``--raw-loops`` (default asyncio, and uvloop when installed), and with
``--floor`` a bare aiohttp hello server and a bare aiohttp proxy to the raw upstream on each
loop; their passes alternate round by round (``--raw-rounds``), figures are medians.
``raw_gateway_<loop>_server_cpu_ms_per_request`` is the gateway's CPU per request and
``raw_gateway_<loop>_ceiling_rps`` (1000 ÷ it) what its one event loop serves on a core of its
own; ``--raw-no-store-too`` adds the same gateway storing nothing (``raw_gateway_no_store_*``).
``--ceiling-only`` runs only these passes.

    python benchmarks/gateway.py [--requests 1000] [--concurrency 32] [--no-store] [--postgres]
                                 [--loop asyncio|uvloop] [--floor] [--throughput-only]
                                 [--thread-commits] [--compare-commits] [--compare-loops]
                                 [--switch-interval MS] [--ceiling-only] [--no-raw]
                                 [--raw-loops asyncio,uvloop] [--raw-requests N]
                                 [--raw-rounds 3] [--raw-clients 1] [--raw-connections 32]
                                 [--raw-no-store-too]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from gateway_load import serve_raw_upstream

# the source tree's agentmeter, not an installed one (the spawned processes inherit the path)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

BODY = {"model": "any", "messages": [
    {"role": "system", "content": "You are a coding agent. " * 40},
    {"role": "user", "content": "Fix the failing test in app.py"}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]}
GEMINI_BODY = {"systemInstruction": {"parts": [{"text": "You are a coding agent. " * 40}]},
               "contents": [{"role": "user", "parts": [{"text": "Fix the failing test in app.py"}]}],
               "tools": [{"functionDeclarations": [{"name": "bash", "parametersJsonSchema": {
                   "type": "object", "properties": {"command": {"type": "string"}}}}]}]}


def _run(main: Any, loop: str) -> None:
    """``main()`` on asyncio's own event loop, or on uvloop's (``--loop uvloop``: optional)."""
    if loop == "uvloop":
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        uvloop.run(main())
    else:
        asyncio.run(main())


def _serve_upstream(q: Any) -> None:
    from aiohttp import web

    from agentmeter.gateway.scripted.policy import Policy
    from agentmeter.gateway.scripted.server import make_app

    async def main() -> None:
        runner = web.AppRunner(make_app(Policy("explorer", 1000)), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def _serve_gateway(q: Any, upstream_port: int, store_dir: str | None, conc: int,
                   ctl: Any, loop: str = "asyncio", thread_commits: bool = False,
                   switch_ms: float | None = None, raw_port: int = 0) -> None:
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

    _run(main, loop)


async def _one(s: aiohttp.ClientSession, url: str, token: str, stream: bool) -> tuple[float, float]:
    """One call; Gemini's when the URL says so (streaming is then the URL's method)."""
    if "/v1beta/" in url:
        body: dict[str, Any] = GEMINI_BODY
        if stream:
            url = url.replace(":generateContent", ":streamGenerateContent?alt=sse")
        headers = {"x-goog-api-key": token}
    else:
        body = dict(BODY, stream=True) if stream else BODY
        headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    async with s.post(url, json=body, headers=headers) as r:
        first = None
        async for _ in r.content.iter_any():
            if first is None:
                first = time.perf_counter() - t0
        assert r.status == 200, r.status
    return time.perf_counter() - t0, first or 0.0


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(int(p * len(xs)), len(xs) - 1)] * 1000


async def _paired(direct_url: str, gw_url: str, token: str, n: int,
                  stream: bool) -> dict[str, float]:
    """Direct and via-gateway requests alternate; the added cost is taken per pair, so its
    percentiles are percentiles of the gateway's own overhead, not differences of two tails."""
    async with aiohttp.ClientSession() as s:
        for _ in range(50):
            await _one(s, direct_url, "direct", stream)
            await _one(s, gw_url, token, stream)
        pairs = []
        for _ in range(n):
            d = await _one(s, direct_url, "direct", stream)
            v = await _one(s, gw_url, token, stream)
            pairs.append((d, v))
    direct = [d[0] for d, _ in pairs]
    via = [v[0] for _, v in pairs]
    added = [v[0] - d[0] for d, v in pairs]
    added_ttft = [v[1] - d[1] for d, v in pairs]
    return {"direct_p50_ms": _pct(direct, 0.5), "via_p50_ms": _pct(via, 0.5),
            "added_p50_ms": _pct(added, 0.5), "added_p99_ms": _pct(added, 0.99),
            "added_ttft_p50_ms": _pct(added_ttft, 0.5), "added_ttft_p99_ms": _pct(added_ttft, 0.99)}


async def _interleaved(direct_url: str, targets: dict[str, tuple[str, str]],
                       n: int) -> dict[str, float]:
    """``_paired`` for several targets (name: (url, token)) in one pass: each round a pair
    for each target in turn (direct, then the target), so they share the machine's moments
    and their added latencies compare in one run."""
    added: dict[str, list[float]] = {name: [] for name in targets}
    async with aiohttp.ClientSession() as s:
        for i in range(50 + n):
            for name, (url, token) in targets.items():
                d = await _one(s, direct_url, "direct", False)
                v = await _one(s, url, token, False)
                if i >= 50:
                    added[name].append(v[0] - d[0])
    out: dict[str, float] = {}
    for name, xs in added.items():
        out[f"{name}_added_p50_ms"] = round(_pct(xs, 0.5), 3)
        out[f"{name}_added_p99_ms"] = round(_pct(xs, 0.99), 3)
    return out


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _throughput(url: str, token: str, n: int, conc: int,
                      pids: dict[str, int] | None = None) -> tuple[float, dict[str, float]]:
    """Requests/s of ``conc`` clients, and the CPU ms per request of each process in ``pids``
    and of this one (``client``): robust on a shared machine, where requests/s follows the
    other load."""
    pids = dict(pids or {}, client=os.getpid())
    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as s:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await _one(s, url, token, False)

        await asyncio.gather(*(worker() for _ in range(conc)))  # warm-up connections
        left = n
        c0 = {name: _cpu_s(pid) for name, pid in pids.items()}
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        rps = n / (time.perf_counter() - t0)
        cpu = {name: (_cpu_s(pid) - c0[name]) * 1000 / n for name, pid in pids.items()}
        return rps, cpu


def _serve_floor(q: Any, kind: str, upstream_port: int, loop: str = "asyncio") -> None:
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

    _run(main, loop)


async def bench(up: int, gw: int, token: str, inproc: str, gemini: str, n: int, conc: int,
                store: bool, gw_pid: int, commits: Any, up_pid: int = 0,
                floors: dict[str, tuple[int, int]] | None = None,
                loop: str = "asyncio", throughput_only: bool = False,
                others: dict[str, tuple[int, str]] | None = None) -> dict[str, Any]:
    """``commits()``: the gateway's (batches, calls, calls committed on its loop) written so
    far. ``floors``: the bare aiohttp servers' (port, pid) by kind (``_serve_floor``).
    ``others``: (port, token) of more gateways by name, their added latency interleaved with
    this one's (``--compare-commits``: ``thread_commits``, every call committed on the writer
    thread; ``no_store``, no sink)."""
    floors = floors or {}
    floor: dict[str, float] = {}
    _, lc0, lo0 = await asyncio.to_thread(commits)
    direct_url = f"http://127.0.0.1:{up}/v1/chat/completions"
    gw_url = f"http://127.0.0.1:{gw}/v1/chat/completions"
    g_path = "/v1beta/models/explorer-1000:generateContent"
    if throughput_only:
        whole = streamed = g_whole = g_streamed = dict.fromkeys(
            ("direct_p50_ms", "via_p50_ms", "added_p50_ms", "added_p99_ms",
             "added_ttft_p50_ms", "added_ttft_p99_ms"), 0.0)
    else:
        whole = await _paired(direct_url, gw_url, token, n, False)
        streamed = await _paired(direct_url, gw_url, token, n, True)
        g_whole = await _paired(f"http://127.0.0.1:{up}{g_path}",
                                f"http://127.0.0.1:{gw}{g_path}", gemini, n, False)
        g_streamed = await _paired(f"http://127.0.0.1:{up}{g_path}",
                                   f"http://127.0.0.1:{gw}{g_path}", gemini, n, True)
        targets = {"interleaved_gateway": (gw_url, token)}
        for name, (port, tok) in (others or {}).items():  # --compare-commits
            targets[f"interleaved_{name}_gateway"] = (
                f"http://127.0.0.1:{port}/v1/chat/completions", tok)
        if "proxy" in floors:  # the least an aiohttp proxy adds, in the same pass
            targets["floor_proxy"] = (f"http://127.0.0.1:{floors['proxy'][0]}"
                                      "/v1/chat/completions", "x")
        if len(targets) > 1:
            floor.update(await _interleaved(direct_url, targets, n))
    _, lc1, lo1 = await asyncio.to_thread(commits)
    direct_rps, direct_cpu = await _throughput(direct_url, "direct", n, conc, {"upstream": up_pid})
    b0, c0, o0 = await asyncio.to_thread(commits)
    gateway_rps, cpu = await _throughput(gw_url, token, n, conc,
                                         {"gateway": gw_pid, "upstream": up_pid})
    b1, c1, o1 = await asyncio.to_thread(commits)
    inproc_rps, cpu_inproc = await _throughput(gw_url, inproc, n, conc, {"gateway": gw_pid})
    for kind, (port, pid) in floors.items():  # --floor: aiohttp's own, same client
        rps, fcpu = await _throughput(f"http://127.0.0.1:{port}/v1/chat/completions", "x", n,
                                      conc, {"server": pid, "upstream": up_pid})
        floor[f"floor_{kind}_rps"] = round(rps, 1)
        floor[f"floor_{kind}_cpu_ms_per_request"] = round(fcpu["server"], 3)
        floor[f"floor_{kind}_client_cpu_ms_per_request"] = round(fcpu["client"], 3)
    # what the three processes take of the machine per request through the gateway, and the
    # requests/s that leaves on its cores: the ceiling of this benchmark on this machine
    # (each process has one event loop: the gateway alone is also bound by 1000 / its ms)
    total = cpu["client"] + cpu["upstream"] + cpu["gateway"]
    ceiling = min((os.cpu_count() or 1) * 1000 / total, 1000 / cpu["gateway"])
    return {
        "benchmark": "gateway",
        "requests": n, "concurrency": conc, "cpus": os.cpu_count(), "calls_stored": store,
        "python": sys.version.split()[0],
        "direct_p50_ms": round(whole["direct_p50_ms"], 3), "gateway_p50_ms": round(whole["via_p50_ms"], 3),
        "added_p50_ms": round(whole["added_p50_ms"], 3),
        "added_p99_ms": round(whole["added_p99_ms"], 3),
        "added_ttft_p50_ms": round(streamed["added_ttft_p50_ms"], 3),
        "added_ttft_p99_ms": round(streamed["added_ttft_p99_ms"], 3),
        "gemini_direct_p50_ms": round(g_whole["direct_p50_ms"], 3),
        "gemini_added_p50_ms": round(g_whole["added_p50_ms"], 3),
        "gemini_added_p99_ms": round(g_whole["added_p99_ms"], 3),
        "gemini_added_ttft_p50_ms": round(g_streamed["added_ttft_p50_ms"], 3),
        "gemini_added_ttft_p99_ms": round(g_streamed["added_ttft_p99_ms"], 3),
        "direct_rps": round(direct_rps, 1),
        "gateway_rps": round(gateway_rps, 1),
        "gateway_inprocess_scripted_rps": round(inproc_rps, 1),
        # the gateway process's CPU per request at ``concurrency`` (its ceiling: 1000 / this
        # requests/s on one core), robust where requests/s follows the machine's other load
        "gateway_cpu_ms_per_request": round(cpu["gateway"], 3),
        "gateway_inprocess_cpu_ms_per_request": round(cpu_inproc["gateway"], 3),
        # the load generator's and the upstream's CPU per request (the client's ceiling alone:
        # 1000 / its ms on one core), and the ceiling they leave the gateway on this machine
        "client_cpu_ms_per_request": round(cpu["client"], 3),
        "upstream_cpu_ms_per_request": round(cpu["upstream"], 3),
        "direct_client_cpu_ms_per_request": round(direct_cpu["client"], 3),
        "direct_upstream_cpu_ms_per_request": round(direct_cpu["upstream"], 3),
        "machine_ceiling_rps": round(ceiling, 1),
        **floor, "gateway_loop": loop,
        # calls per transaction during the HTTP-upstream throughput load (group commit)
        "calls_per_commit": round((c1 - c0) / max(b1 - b0, 1), 2),
        # the share of calls committed on the event loop (lone calls, ``gateway.persist``)
        # in the latency pairs and under the throughput load
        "latency_calls_committed_on_loop": round((lo1 - lo0) / max(lc1 - lc0, 1), 3),
        "throughput_calls_committed_on_loop": round((o1 - o0) / max(c1 - c0, 1), 3),
        # issue 30: 5,000 requests/s and 0.5 ms added, every call durable (was 2 ms, 500)
        "targets": {"added_p50_ms": 0.5, "added_ttft_p50_ms": 2.0, "gateway_rps": 5000,
                    "gemini_added_p50_ms": 2.0, "gemini_added_ttft_p50_ms": 2.0},
    }


def store_cost(location: str | None = None, n: int = 2048, batch: int = 32,
               prefix: str = "store") -> dict[str, float]:
    """ms per call of storing ``n`` calls, one transaction per call (what the gateway did
    before group commit) and ``batch`` per transaction (its writer under load), one after the
    other in this process: CPU ms of this process, and for PostgreSQL (``location`` a URL)
    wall ms too (the server's work is in another process). Default: a SQLite store (WAL) in a
    temporary directory."""
    from agentmeter.records import ModelCallRecord, RunRecord, TokenUsage, utcnow
    from agentmeter.store.db import Store

    call = ModelCallRecord(trial_id="t", seq=0, wire_api="chat", client_api="chat", model="m",
                           upstream_model="m", status_code=200, stream=False,
                           started_at=utcnow(), latency_s=0.01, ttft_s=None,
                           usage=TokenUsage(input=100, output=5), cost_usd=0.001, bytes_in=500,
                           bytes_out=900, scripted=True)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentmeter-bench-") as d, \
            Store.open(location or d, runs_dir=Path(d)) as st:
        st.create_run(RunRecord(id="s", backend="local", attempts=1, concurrency=1))
        seq = 0
        for name, size in ((f"{prefix}_one_per_commit", 1),
                           (f"{prefix}_{batch}_per_commit", batch)):
            t0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n // size):
                st.add_call_batch([("s", 0, call.model_copy(update={"seq": seq + i}))
                                   for i in range(size)])
                seq += size
            out[f"{name}_cpu_ms"] = round((time.process_time() - t0) * 1000 / n, 4)
            if location is not None:
                out[f"{name}_wall_ms"] = round((time.perf_counter() - w0) * 1000 / n, 4)
    return out


def pg_store_cost() -> dict[str, float]:
    """``store_cost`` on a PostgreSQL server started for it (the tests' server: fsync off, so
    the commit's flush, which group commit also saves, is not in the figures)."""
    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path.insert(0, str(tests))
    from pg_fixtures import postgres_server  # type: ignore[import-not-found]

    with postgres_server() as url:
        return store_cost(url, prefix="pg_store")


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def raw_ceiling(ctx: Any, q: Any, raw_port: int, raw_pid: int, loops: list[str], n: int,
                rounds: int, clients: int, conns: int, store: bool,
                floor: bool, no_store_too: bool = False) -> dict[str, Any]:
    """The gateway's own ceiling: the raw load (``gateway_load``: keep-alive sockets, a
    prebuilt request, ``clients`` processes of ``conns`` connections) against a gateway whose
    model is the raw upstream, for each event loop in ``loops``, with (``floor``) a bare aiohttp
    hello server and a bare aiohttp proxy to the raw upstream on the same loop; their passes
    alternate round by round, figures are medians over ``rounds``. Each gateway stores every
    call (``store``) and the count stored is checked against the count served;
    ``no_store_too`` adds, on the first loop, the same gateway storing nothing
    (``raw_gateway_no_store_*``: what durability costs per request)."""
    from gateway_load import RawLoad

    body = json.dumps(BODY).encode()
    path = "/v1/chat/completions"
    dirs: list[tempfile.TemporaryDirectory[str]] = []
    procs: list[Any] = []
    loads: dict[tuple[str, str], tuple[RawLoad, dict[str, int]]] = {}
    stores: dict[str, str] = {}
    ctl = ctx.Queue()
    try:
        loads[("direct", "-")] = (RawLoad(ctx, raw_port, path, "direct", body, clients, conns),
                                  {"upstream": raw_pid})
        gateways = [("gateway", loop, store) for loop in loops]
        if no_store_too:
            gateways.insert(1, ("gateway_no_store", loops[0], False))
        for target, loop, stored in gateways:
            d = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
            dirs.append(d)
            gw = ctx.Process(target=_serve_gateway, daemon=True, args=(
                q, raw_port, d.name if stored else None, conns * clients, ctl, loop, False,
                None, raw_port))
            gw.start()
            procs.append(gw)
            port, _, _, _, token, gw_pid = q.get(timeout=60)
            if stored:
                stores[loop] = d.name
            loads[(target, loop)] = (RawLoad(ctx, port, path, token, body, clients, conns),
                                     {"server": gw_pid, "upstream": raw_pid})
            if target != "gateway":
                continue
            for kind in ("hello", "proxy_raw") if floor else ():
                fp = ctx.Process(target=_serve_floor, args=(q, kind, raw_port, loop), daemon=True)
                fp.start()
                procs.append(fp)
                fport = q.get(timeout=60)
                loads[(kind, loop)] = (RawLoad(ctx, fport, path, "x", body, clients, conns),
                                       {"server": fp.pid or 0, "upstream": raw_pid})
        for load, pids in loads.values():  # warm-up: connections, caches, the store's file
            load.run(max(n // 4, clients * conns), pids)
        got: dict[tuple[str, str], list[dict[str, float]]] = {k: [] for k in loads}
        for _ in range(rounds):
            for key, (load, pids) in loads.items():
                got[key].append(load.run(n, pids))
        out: dict[str, Any] = {"raw_requests": n, "raw_rounds": rounds, "raw_clients": clients,
                               "raw_connections": conns * clients}
        for (target, loop), runs in got.items():
            name = "raw_direct" if target == "direct" else (
                "raw_gateway_no_store" if target == "gateway_no_store" else f"raw_{target}_{loop}")
            out[f"{name}_rps"] = round(_median([r["rps"] for r in runs]), 1)
            for who in ("server", "upstream", "client"):
                if f"{who}_cpu_ms" in runs[0]:
                    out[f"{name}_{who}_cpu_ms_per_request"] = round(
                        _median([r[f"{who}_cpu_ms"] for r in runs]), 4)
            out[f"{name}_errors"] = int(sum(r["errors"] for r in runs))
            if target.startswith("gateway"):  # one event loop: its ceiling on a core alone
                out[f"{name}_ceiling_rps"] = round(
                    1000 / out[f"{name}_server_cpu_ms_per_request"], 1)
        for p in procs:
            p.terminate()
            p.join(5)
        if store:
            from agentmeter.store.db import Store

            served = max(n // 4, clients * conns) // clients * clients + rounds * (
                n // clients * clients)
            for loop, where in stores.items():
                with Store.open(where) as st:
                    out[f"raw_gateway_{loop}_stored_calls"] = len(st.model_calls("bench"))
                out[f"raw_gateway_{loop}_served_calls"] = served
        return out
    finally:
        for load, _ in loads.values():
            load.close()
        for p in procs:
            p.terminate()
            p.join(5)
        for d in dirs:
            d.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-store", action="store_true", help="no per-call persistence")
    ap.add_argument("--postgres", action="store_true",
                    help="also the store's cost per call on PostgreSQL (starts a server; root)")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="the gateway's event loop (uvloop: optional, if installed)")
    ap.add_argument("--floor", action="store_true",
                    help="also a bare aiohttp server and a bare aiohttp proxy, same client")
    ap.add_argument("--thread-commits", action="store_true",
                    help="every call committed on the writer thread, a lone one too (as "
                         "before 2026-11-29): the A of an A/B")
    ap.add_argument("--compare-commits", action="store_true",
                    help="also a gateway with --thread-commits and one with --no-store, their "
                         "added latency interleaved pair by pair with this one's (and "
                         "--floor's proxy's)")
    ap.add_argument("--compare-loops", action="store_true",
                    help="also the gateway on the other event loop (uvloop if --loop asyncio), "
                         "its added latency interleaved pair by pair with this one's: "
                         "interleaved_{uvloop,asyncio}_gateway_*")
    ap.add_argument("--switch-interval", type=float, metavar="MS",
                    help="the gateway process's sys.setswitchinterval, in ms (Python's "
                         "default: 5)")
    ap.add_argument("--throughput-only", action="store_true",
                    help="no latency pairs: the throughput passes only (their figures 0)")
    ap.add_argument("--raw-loops", default=None,
                    help="event loops of the raw-load passes, comma-separated (default: "
                         "asyncio, and uvloop when installed)")
    ap.add_argument("--raw-requests", type=int, default=None,
                    help="requests per raw-load pass (default: --requests x 3)")
    ap.add_argument("--raw-rounds", type=int, default=3)
    ap.add_argument("--raw-clients", type=int, default=1, help="raw load processes")
    ap.add_argument("--raw-connections", type=int, default=32,
                    help="keep-alive connections per raw load process")
    ap.add_argument("--ceiling-only", action="store_true",
                    help="only the raw-load passes (the gateway's own ceiling), no aiohttp "
                         "client, no latency pairs")
    ap.add_argument("--no-raw", action="store_true", help="no raw-load passes")
    ap.add_argument("--raw-no-store-too", action="store_true",
                    help="raw-load passes also against the gateway storing nothing (first loop)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    raw_up = ctx.Process(target=serve_raw_upstream, args=(q,), daemon=True)
    raw_up.start()
    raw_port = q.get(timeout=30)
    raw: dict[str, Any] = {}
    if not args.no_raw:
        if args.raw_loops is not None:
            loops = args.raw_loops.split(",")
        else:
            loops = ["asyncio"]
            try:
                import uvloop  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
                loops.append("uvloop")
            except ImportError:
                pass
        try:
            raw = raw_ceiling(ctx, q, raw_port, raw_up.pid or 0, loops,
                              args.raw_requests or args.requests * 3, args.raw_rounds,
                              args.raw_clients, args.raw_connections, not args.no_store,
                              args.floor, args.raw_no_store_too)
        finally:
            if args.ceiling_only:
                raw_up.terminate()
        if args.ceiling_only:
            print(json.dumps({"benchmark": "gateway_ceiling", "cpus": os.cpu_count(),
                              "python": sys.version.split()[0], "calls_stored": not args.no_store,
                              **raw, "targets": {"gateway_rps": 5000}}))
            return
    tmp = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
    store_dir = None if args.no_store else tmp.name
    ctl = ctx.Queue()
    upstream = ctx.Process(target=_serve_upstream, args=(q,), daemon=True)
    upstream.start()
    up_port = q.get(timeout=30)
    gateway = ctx.Process(target=_serve_gateway,
                          args=(q, up_port, store_dir, args.concurrency, ctl, args.loop,
                                args.thread_commits, args.switch_interval, raw_port),
                          daemon=True)
    gateway.start()
    gw_port, token, inproc, gemini, _, _ = q.get(timeout=30)
    procs = [gateway, upstream, raw_up]
    others: dict[str, tuple[int, str]] = {}
    ctls = []
    tdir = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
    udir = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
    other_loop = "uvloop" if args.loop == "asyncio" else "asyncio"
    compared = [("thread_commits", tdir.name, True, args.loop),
                ("no_store", None, False, args.loop)] if args.compare_commits else []
    if args.compare_loops:  # the same gateway (storing every call) on the other event loop
        compared.append((other_loop, None if args.no_store else udir.name, False, other_loop))
    for name, where, thread, other_loop in compared:
        other_ctl = ctx.Queue()  # kept: a queue collected before the child starts is gone
        ctls.append(other_ctl)
        other = ctx.Process(target=_serve_gateway, args=(
            q, up_port, where, args.concurrency, other_ctl, other_loop, thread, None, raw_port),
            daemon=True)
        other.start()
        procs.append(other)
        port, tok, *_ = q.get(timeout=30)
        others[name] = (port, tok)
    floors: dict[str, tuple[int, int]] = {}
    for kind in ("hello", "proxy") if args.floor else ():
        proc = ctx.Process(target=_serve_floor, args=(q, kind, up_port, args.loop), daemon=True)
        proc.start()
        procs.append(proc)
        floors[kind] = (q.get(timeout=30), proc.pid or 0)

    def commits() -> tuple[int, int, int]:
        ctl.put(None)
        return q.get(timeout=30)  # type: ignore[no-any-return]
    try:
        result = asyncio.run(bench(up_port, gw_port, token, inproc, gemini, args.requests,
                                   args.concurrency, store_dir is not None,
                                   gateway.pid or 0, commits, upstream.pid or 0, floors,
                                   args.loop, args.throughput_only, others))
        if store_dir is not None:  # every served call is in the store
            from agentmeter.store.db import Store

            with Store.open(store_dir) as st:
                result["stored_calls"] = len(st.model_calls("bench"))
    finally:
        for p in procs:
            p.terminate()
            p.join(5)
        tmp.cleanup()
        tdir.cleanup()
        udir.cleanup()
    result["gateway_switch_interval_ms"] = args.switch_interval or 5.0
    result.update(raw)
    result.update(store_cost())
    if args.postgres:
        result.update(pg_store_cost())
    print(json.dumps(result))


if __name__ == "__main__":
    main()

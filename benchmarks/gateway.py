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
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from gateway_ceiling import raw_ceiling, raw_loops
from gateway_load import cpu_s
from gateway_servers import BODY, Servers, serve_gateway, stored_calls

GEMINI_BODY = {"systemInstruction": {"parts": [{"text": "You are a coding agent. " * 40}]},
               "contents": [{"role": "user", "parts": [{"text": "Fix the failing test in app.py"}]}],
               "tools": [{"functionDeclarations": [{"name": "bash", "parametersJsonSchema": {
                   "type": "object", "properties": {"command": {"type": "string"}}}}]}]}


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
        c0 = {name: cpu_s(pid) for name, pid in pids.items()}
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        rps = n / (time.perf_counter() - t0)
        cpu = {name: (cpu_s(pid) - c0[name]) * 1000 / n for name, pid in pids.items()}
        return rps, cpu


async def bench(up: int, gw: int, token: str, inproc: str, gemini: str, n: int, conc: int,
                store: bool, gw_pid: int, commits: Any, up_pid: int = 0,
                floors: dict[str, tuple[int, int]] | None = None,
                loop: str = "asyncio", throughput_only: bool = False,
                others: dict[str, tuple[int, str]] | None = None) -> dict[str, Any]:
    """``commits()``: the gateway's (batches, calls, calls committed on its loop) written so
    far. ``floors``: the bare aiohttp servers' (port, pid) by kind
    (``gateway_servers.serve_floor``). ``others``: (port, token) of more gateways by name, their
    added latency interleaved with this one's (``--compare-commits``: ``thread_commits``,
    every call committed on the writer thread; ``no_store``, no sink)."""
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
    with Servers() as s:
        raw_port, raw_pid = s.raw_upstream()
        raw: dict[str, Any] = {}
        if not args.no_raw:
            raw = raw_ceiling(raw_port, raw_pid, raw_loops(args.raw_loops),
                              args.raw_requests or args.requests * 3, args.raw_rounds,
                              args.raw_clients, args.raw_connections, not args.no_store,
                              args.floor, args.raw_no_store_too)
            if args.ceiling_only:
                print(json.dumps({"benchmark": "gateway_ceiling", "cpus": os.cpu_count(),
                                  "python": sys.version.split()[0],
                                  "calls_stored": not args.no_store, **raw,
                                  "targets": {"gateway_rps": 5000}}))
                return
        result = _aiohttp_passes(s, args, raw_port)
    result["gateway_switch_interval_ms"] = args.switch_interval or 5.0
    result.update(raw)
    result.update(store_cost())
    if args.postgres:
        result.update(pg_store_cost())
    print(json.dumps(result))


def _aiohttp_passes(s: Servers, args: argparse.Namespace, raw_port: int) -> dict[str, Any]:
    """``bench``'s latency pairs and throughput passes (the aiohttp client, the scripted
    upstream), their processes in ``s``."""
    dirs = {name: os.path.join(s.tmp.name, name) for name in ("main", "thread", "other_loop")}
    for d in dirs.values():
        os.mkdir(d)
    store_dir = None if args.no_store else dirs["main"]
    q, ctl = s.q, s.ctx.Queue()
    upstream = s.start(_serve_upstream, q)
    up_port = q.get(timeout=30)
    gateway = s.start(serve_gateway, q, up_port, store_dir, args.concurrency, ctl, args.loop,
                      args.thread_commits, args.switch_interval, raw_port)
    gw_port, token, inproc, gemini, _, _ = q.get(timeout=30)
    others: dict[str, tuple[int, str]] = {}
    ctls = []
    other_loop = "uvloop" if args.loop == "asyncio" else "asyncio"
    compared = [("thread_commits", dirs["thread"], True, args.loop),
                ("no_store", None, False, args.loop)] if args.compare_commits else []
    if args.compare_loops:  # the same gateway (storing every call) on the other event loop
        compared.append((other_loop, None if args.no_store else dirs["other_loop"], False,
                         other_loop))
    for name, where, thread, other_loop in compared:
        other_ctl = s.ctx.Queue()  # kept: a queue collected before the child starts is gone
        ctls.append(other_ctl)
        s.start(serve_gateway, q, up_port, where, args.concurrency, other_ctl, other_loop,
                thread, None, raw_port)
        port, tok, *_ = q.get(timeout=30)
        others[name] = (port, tok)
    floors: dict[str, tuple[int, int]] = {}
    for kind in ("hello", "proxy") if args.floor else ():
        floors[kind] = s.floor(kind, up_port, args.loop)

    def commits() -> tuple[int, int, int]:
        ctl.put(None)
        return q.get(timeout=30)  # type: ignore[no-any-return]

    result = asyncio.run(bench(up_port, gw_port, token, inproc, gemini, args.requests,
                               args.concurrency, store_dir is not None, gateway.pid or 0,
                               commits, upstream.pid or 0, floors, args.loop,
                               args.throughput_only, others))
    s.stop()
    if store_dir is not None:  # every served call is in the store
        result["stored_calls"] = stored_calls(store_dir)
    return result


if __name__ == "__main__":
    main()

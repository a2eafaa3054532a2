"""Where a lone call's time goes inside the gateway: timestamps along one call's path.

The scripted upstream over loopback HTTP, two gateways that store every call in a SQLite store
(``loop``: as shipped, a lone call committed on the event loop; ``thread``: every call to the
writer thread, as before 2026-11-29), and this client sending the latency pairs of
``benchmarks/gateway.py`` (direct, then through a gateway), the two gateways in alternating
rounds. Each gateway process wraps its handler, the upstream send, the writer's hand-off,
commit and release with ``time.perf_counter`` marks; the medians of each segment (ms) per
gateway, and each pass's added p50, are printed as a final JSON line.

    python benchmarks/gateway_path.py [--requests 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway as bench  # noqa: E402  (benchmarks/gateway.py: its processes and pairs)
from gateway_servers import serve_gateway  # noqa: E402

#: consecutive marks whose differences are reported, in path order (a mark missing on a path
#: is skipped: the loop path has no hand-off)
MARKS = ("entry", "up_start", "up_end", "write_start", "hand_over", "thread_run", "commit_start",
         "committed", "released", "write_end", "handler_return")


def _serve(q: Any, ctl: Any, upstream_port: int, store_dir: str, thread_commits: bool) -> None:
    from agentmeter.gateway import persist, server
    from agentmeter.gateway import upstream as up
    from agentmeter.store.db import Store

    segments: dict[str, list[float]] = {}
    t: dict[str, float] = {}

    def mark(name: str) -> None:
        t.setdefault(name, time.perf_counter())

    def wrap_async(owner: Any, attr: str, before: str, after: str) -> None:
        orig = getattr(owner, attr)

        async def wrapped(*a: Any, **k: Any) -> Any:
            mark(before)
            r = await orig(*a, **k)
            mark(after)
            return r
        setattr(owner, attr, wrapped)

    def wrap(owner: Any, attr: str, before: str, after: str | None) -> None:
        orig = getattr(owner, attr)

        def wrapped(*a: Any, **k: Any) -> Any:
            mark(before)
            r = orig(*a, **k)
            if after:
                mark(after)
            return r
        setattr(owner, attr, wrapped)

    handle = server.Gateway._handle_call

    async def handle_call(self: Any, request: Any) -> Any:
        t.clear()
        t["entry"] = time.perf_counter()
        r = await handle(self, request)
        t["handler_return"] = time.perf_counter()
        seen = [m for m in MARKS if m in t]
        if "write_start" in t and "up_end" in t:
            for a, b in zip(seen, seen[1:], strict=False):
                segments.setdefault(f"{a}->{b}", []).append((t[b] - t[a]) * 1000)
            segments.setdefault("write_start->write_end", []).append(
                (t["write_end"] - t["write_start"]) * 1000)
        return r

    server.Gateway._handle_call = handle_call  # type: ignore[method-assign]
    wrap_async(up.HttpUpstream, "send", "up_start", "up_end")
    wrap_async(persist.CallWriter, "write", "write_start", "write_end")
    wrap(persist.CallWriter, "_hand_over", "hand_over", None)
    wrap(persist, "_write_batch", "thread_run", "committed")
    wrap(persist, "_release", "released", None)
    wrap(Store, "add_call_batch_now", "commit_start", "committed")

    def report() -> None:
        while True:
            ctl.get()
            q.put({k: round(statistics.median(v), 3) for k, v in segments.items()})
            segments.clear()

    threading.Thread(target=report, daemon=True).start()
    serve_gateway(q, upstream_port, store_dir, 32, mp.get_context("spawn").Queue(),
                  thread_commits=thread_commits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    upstream = ctx.Process(target=bench._serve_upstream, args=(q,), daemon=True)
    upstream.start()
    up_port = q.get(timeout=30)
    procs, gws = [upstream], {}
    tmp = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
    for name in ("loop", "thread"):
        qq, ctl = ctx.Queue(), ctx.Queue()
        d = Path(tmp.name) / name
        d.mkdir()
        p = ctx.Process(target=_serve, args=(qq, ctl, up_port, str(d), name == "thread"),
                        daemon=True)
        p.start()
        procs.append(p)
        port, token, *_ = qq.get(timeout=30)
        gws[name] = (port, token, qq, ctl)
    passes: dict[str, list[dict[str, Any]]] = {name: [] for name in gws}
    direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    try:
        for _ in range(args.rounds):
            for name, (port, token, qq, ctl) in gws.items():
                pairs = asyncio.run(bench._paired(
                    direct, f"http://127.0.0.1:{port}/v1/chat/completions", token,
                    args.requests, False))
                ctl.put(None)
                passes[name].append({"added_p50_ms": round(pairs["added_p50_ms"], 3),
                                     **qq.get(timeout=30)})
    finally:
        for p in procs:
            p.terminate()
            p.join(5)
        tmp.cleanup()
    print(json.dumps({"benchmark": "gateway_path", "requests": args.requests,
                      "rounds": args.rounds, "passes": passes}))


if __name__ == "__main__":
    main()

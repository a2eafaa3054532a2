"""A/B of two versions of the gateway's code under the raw load (``gateway_load``): each
version's gateway (every call stored in SQLite, as ``benchmarks/gateway.py``'s raw-load passes)
in its own process, loaded from its own copy of ``src`` (``git archive`` of a revision, or the
working tree), their passes alternating round by round in one run; CPU ms per request of each
gateway process over its timed passes (``/proc/<pid>/stat``), requests/s, calls stored against
served. The final line is JSON: ``a_*``, ``b_*`` and ``b_over_a_cpu`` (median of the rounds'
ratios).

    python benchmarks/gateway_ab.py --a HEAD~1 [--b WORKTREE] [--requests 4000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway import BODY, _median, _serve_gateway  # noqa: E402
from gateway_load import RawLoad, serve_raw_upstream  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _serve_from(src: str, *args: Any) -> None:
    """``gateway._serve_gateway`` with agentmeter imported from ``src``."""
    sys.path.insert(0, src)
    for name in [m for m in sys.modules if m == "agentmeter" or m.startswith("agentmeter.")]:
        del sys.modules[name]
    import agentmeter

    assert Path(agentmeter.__file__).resolve().is_relative_to(Path(src).resolve())
    _serve_gateway(*args)


def _tree(rev: str, into: str) -> str:
    """The ``src`` directory of ``rev`` (``WORKTREE``: this checkout's own)."""
    if rev == "WORKTREE":
        return str(ROOT / "src")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return os.path.join(into, "src")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", default="HEAD~1", help="a git revision, or WORKTREE")
    ap.add_argument("--b", default="WORKTREE", help="a git revision, or WORKTREE")
    ap.add_argument("--requests", type=int, default=4000, help="requests per pass")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q, ctl = ctx.Queue(), ctx.Queue()
    body = json.dumps(BODY).encode()
    path = "/v1/chat/completions"
    tmp = tempfile.TemporaryDirectory(prefix="agentmeter-bench-")
    procs: list[Any] = []
    loads: dict[str, tuple[RawLoad, dict[str, int]]] = {}
    try:
        raw_up = ctx.Process(target=serve_raw_upstream, args=(q,), daemon=True)
        raw_up.start()
        procs.append(raw_up)
        raw_port = q.get(timeout=30)
        stores: dict[str, str] = {}
        for side, rev in (("a", args.a), ("b", args.b)):
            d = os.path.join(tmp.name, side)
            os.makedirs(os.path.join(d, "store"))
            src = _tree(rev, d)
            stores[side] = os.path.join(d, "store")
            p = ctx.Process(target=_serve_from, daemon=True, args=(
                src, q, raw_port, stores[side], args.connections, ctl, "asyncio", False, None,
                raw_port))
            p.start()
            procs.append(p)
            port, _, _, _, token, pid = q.get(timeout=60)
            loads[side] = (RawLoad(ctx, port, path, token, body, 1, args.connections),
                           {"server": pid, "upstream": raw_up.pid or 0})
        warm = max(args.requests // 4, args.connections)
        for load, pids in loads.values():
            load.run(warm, pids)
        got: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        for i in range(args.rounds):  # a b, b a, a b, ...: neither always goes first
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                load, pids = loads[side]
                got[side].append(load.run(args.requests, pids))
        out: dict[str, Any] = {"benchmark": "gateway_ab", "a": args.a, "b": args.b,
                               "requests": args.requests, "rounds": args.rounds}
        for side, runs in got.items():
            out[f"{side}_server_cpu_ms_per_request"] = round(
                _median([r["server_cpu_ms"] for r in runs]), 4)
            out[f"{side}_server_cpu_ms_each"] = [round(r["server_cpu_ms"], 4) for r in runs]
            out[f"{side}_rps"] = round(_median([r["rps"] for r in runs]), 1)
            out[f"{side}_errors"] = int(sum(r["errors"] for r in runs))
        out["b_over_a_cpu"] = round(_median([b["server_cpu_ms"] / a["server_cpu_ms"]
                                             for a, b in zip(got["a"], got["b"], strict=True)]), 3)
        for p in procs:
            p.terminate()
            p.join(5)
        from agentmeter.store.db import Store

        served = warm + args.rounds * args.requests
        for side, where in stores.items():
            with Store.open(where) as st:
                out[f"{side}_stored_calls"] = len(st.model_calls("bench"))
            out[f"{side}_served_calls"] = served
        print(json.dumps(out))
    finally:
        for load, _ in loads.values():
            load.close()
        for p in procs:
            p.terminate()
            p.join(5)
        tmp.cleanup()


if __name__ == "__main__":
    main()

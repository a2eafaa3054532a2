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
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_load import RawLoad  # noqa: E402
from gateway_servers import Servers, median, run_passes, stored_calls, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


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
    with Servers() as s:
        raw_port, raw_pid = s.raw_upstream()
        stores: dict[str, str] = {}
        loads: dict[str, tuple[RawLoad, dict[str, int]]] = {}
        for side, rev in (("a", args.a), ("b", args.b)):
            d = os.path.join(s.tmp.name, side)
            os.makedirs(os.path.join(d, "store"))
            stores[side] = os.path.join(d, "store")
            port, token, pid = s.gateway(raw_port, stores[side], args.connections,
                                         src=_tree(rev, d))
            loads[side] = (s.raw_load(port, token, 1, args.connections),
                           {"server": pid, "upstream": raw_pid})
        warm = max(args.requests // 4, args.connections)
        # a b, b a, a b, ...: neither always goes first
        got = run_passes(loads, args.requests, args.rounds, warm, alternate=True)
        out: dict[str, Any] = {"benchmark": "gateway_ab", "a": args.a, "b": args.b,
                               "requests": args.requests, "rounds": args.rounds}
        for side, runs in got.items():
            out.update(summarize(side, runs, ceiling=False))
            out[f"{side}_server_cpu_ms_each"] = [round(r["server_cpu_ms"], 4) for r in runs]
        out["b_over_a_cpu"] = round(median([b["server_cpu_ms"] / a["server_cpu_ms"]
                                            for a, b in zip(got["a"], got["b"], strict=True)]), 3)
        s.stop()
        for side, where in stores.items():
            out[f"{side}_stored_calls"] = stored_calls(where)
            out[f"{side}_served_calls"] = warm + args.rounds * args.requests
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Runner benchmark: harness overhead per trial and trials per minute.

Overhead = trial wall time minus the agent's and the verifier's own command time, for the oracle
on a trivial task on the local backend. Throughput: the same trial at concurrency 8 on this
machine. Prints a human summary, then a final JSON line.
Usage: python benchmarks/runner.py [--trials 40]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from taskgen import make_task  # noqa: E402

from agentmeter.runner.session import RunRequest, prepare, run  # noqa: E402
from agentmeter.store.db import Store  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def bench(trials: int, concurrency: int, root: Path) -> tuple[list[float], float]:
    suite = root / f"suite-c{concurrency}"
    for i in range(trials):
        make_task(suite, f"trivial-{i:03d}", solve="echo done > /app/done")
    store = Store.open(root / f"runs-c{concurrency}")
    req = RunRequest(suites=[str(suite)], agents=["oracle"], concurrency=concurrency)
    prepared = prepare(req)
    # build the (shared) environment layer first: we measure trials, not the first build
    await run(store, prepare(RunRequest(suites=[str(suite)], task_ids=["trivial-000"],
                                        agents=["nop"])))
    t = time.perf_counter()
    rid, _ = await run(store, prepared)
    wall = time.perf_counter() - t
    overheads = []
    for rec in store.trials(rid):
        total = (rec.finished_at - rec.started_at).total_seconds()  # type: ignore[operator]
        own = (rec.timings.agent_command or 0) + (rec.timings.verifier_command or 0)
        overheads.append(total - own)
        assert rec.status.value == "passed", rec.error
    return overheads, wall


async def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seq, _ = await bench(args.trials, 1, Path(tmp))
        _, wall8 = await bench(args.trials, 8, Path(tmp))
    res: dict[str, object] = {
        "machine": {"cpus": os.cpu_count()},
        "overhead_per_trial_ms": {"p50": round(pct(seq, 50) * 1000, 1),
                                  "p95": round(pct(seq, 95) * 1000, 1), "n": len(seq)},
        "trials_per_minute_at_concurrency_8": round(args.trials / wall8 * 60, 1),
    }
    res["targets_met"] = {"overhead_p50_le_150ms": res["overhead_per_trial_ms"]["p50"] <= 150}  # type: ignore[index]
    return res


if __name__ == "__main__":
    out = asyncio.run(main())
    print(out, file=sys.stderr)
    print(json.dumps(out))

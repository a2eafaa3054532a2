"""The Ray executor's node side without Ray: what ``ray_node.run_job`` adds to a trial.

``benchmarks/ray.py`` measures the whole Ray executor (a cluster, PostgreSQL, the driver):
≈ 62 ms added per trial, within a noise of ±250 ms on a shared machine. This script takes the
node's own part apart, in one process, on a SQLite store: the oracle on a trivial task, N trials
through ``run_job`` exactly as a Ray worker runs them (job JSON in, the task's tar blob, the
artifacts' tar blob out, the lease and the fenced writes) against N trials through the local
executor (``run``, concurrency 1), alternated ``--repeats`` times. Reported per trial: CPU
(``time.process_time``: stable under load, unlike wall time), wall, threads started, and the
payload sizes. What remains of the 62 ms beyond the node's share is Ray's own submission and
pickup, PostgreSQL round trips and the driver's side.

Usage: ``python benchmarks/ray_node.py [--trials 20] [--repeats 2]``. The last line printed is
JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
from taskgen import make_task  # noqa: E402

from agentmeter.records import RunRecord, TrialRecord  # noqa: E402
from agentmeter.runner import ray_node, shipping  # noqa: E402
from agentmeter.runner.plan import build_plan  # noqa: E402
from agentmeter.runner.ray_cluster import store_url  # noqa: E402
from agentmeter.runner.session import RunRequest, prepare, run  # noqa: E402
from agentmeter.store.db import Store  # noqa: E402

_starts = [0]
_start = threading.Thread.start


def _counting_start(self: threading.Thread) -> None:
    _starts[0] += 1
    _start(self)


threading.Thread.start = _counting_start  # type: ignore[method-assign]


def measure(fn: Any, n: int) -> dict[str, float]:
    _starts[0] = 0
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"cpu_ms": cpu / n * 1000, "wall_ms": wall / n * 1000, "threads": _starts[0] / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    n = args.trials
    tmp = Path(tempfile.mkdtemp(prefix="agentmeter-raynode-"))
    suite = tmp / "suite"
    make_task(suite, "trivial", solve="echo done > /app/done")
    one = RunRequest(suites=[str(suite)], agents=["oracle"])
    sizes: dict[str, int] = {}
    node: list[dict[str, float]] = []
    local: list[dict[str, float]] = []
    for r in range(args.repeats):
        store = Store.open(tmp / f"node-{r}")
        asyncio.run(run(store, prepare(one)))  # warm: layers, imports, first use
        prepared = prepare(RunRequest(suites=[str(suite)], agents=["oracle"], attempts=n + 1))
        rid = f"node-{r}"
        store.create_run(RunRecord(id=rid, backend="local", attempts=n + 1, concurrency=1,
                                   settings={}))
        for c in prepared.configs:
            store.upsert_config(c.record, run_id=rid)
        for t in prepared.tasks:
            store.upsert_task(t.to_record(prepared.suite_name), run_id=rid)
        plan = build_plan(prepared.configs, prepared.tasks, n + 1)
        blob, model = shipping.pack_task(plan[0].task)
        jobs = [ray_node.NodeJob(
            run_id=rid, store_url=store_url(store), backend="local", config=p.config.record,
            tasks=[model], records=[TrialRecord(id=p.trial_id, run_id=rid,
                                                config_id=p.config.record.id, task_id=p.task.id,
                                                attempt=p.attempt, try_number=0)],
        ).model_dump_json() for p in plan]
        ray_node.run_job(jobs[0], blob)  # the worker's first job: its caches
        outs: list[tuple[str, bytes]] = []
        node.append(measure(lambda o=outs, b=blob, js=jobs: o.extend(ray_node.run_job(j, b)
                                                                      for j in js[1:]), n))
        statuses = {json.loads(o[0])["records"][0]["status"] for o in outs}
        assert statuses == {"passed"}, statuses
        sizes = {"job_json": len(jobs[0]), "task_blob": len(blob), "artifacts_blob": len(outs[0][1])}
        store2 = Store.open(tmp / f"local-{r}")
        asyncio.run(run(store2, prepare(one)))
        req = RunRequest(suites=[str(suite)], agents=["oracle"], attempts=n, concurrency=1)
        local.append(measure(lambda s=store2, q=req: asyncio.run(run(s, prepare(q))), n))
        print({"node": node[-1], "local": local[-1]}, file=sys.stderr, flush=True)

    def med(rows: list[dict[str, float]], k: str) -> float:
        return round(statistics.median(x[k] for x in rows), 1)

    res = {"benchmark": "ray_node", "trials": n, "repeats": args.repeats,
           "loadavg": [round(x, 1) for x in os.getloadavg()], "payload_bytes": sizes,
           "per_trial": {k: {"node": med(node, k), "local": med(local, k),
                             "node_minus_local": round(med(node, k) - med(local, k), 1)}
                         for k in ("cpu_ms", "wall_ms", "threads")}}
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()

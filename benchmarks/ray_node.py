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

Usage: ``python benchmarks/ray_node.py [--trials 20] [--repeats 2] [--baseline-src DIR]``. The
last line printed is JSON. With ``--baseline-src`` (another checkout's ``src``, e.g. ``git
archive <commit> src | tar -x -C /tmp/base``) each repeat runs twice in a fresh process, once
with this tree's code and once with the baseline's, alternated: before/after in one run
(``baseline`` and ``this_minus_baseline`` in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the code measured (``--baseline-src`` runs this script again with the baseline's here)
SRC = os.environ.get("AGENTMETER_BENCH_SRC") or str(ROOT / "src")
sys.path[:0] = [SRC, str(ROOT / "tests")]
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


def ab(trials: int, repeats: int, baseline: Path) -> None:
    """Each repeat: this tree's code, then the baseline's, each in a process of its own."""
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    for _ in range(repeats):
        for name, src in (("this", str(ROOT / "src")), ("baseline", str(baseline))):
            r = subprocess.run([sys.executable, __file__, "--trials", str(trials), "--repeats", "1"],
                               capture_output=True, text=True, timeout=3600,
                               env={**os.environ, "AGENTMETER_BENCH_SRC": src})
            if r.returncode != 0:
                raise SystemExit(f"{name} failed:\n{r.stderr[-3000:]}")
            runs[name].append(json.loads(r.stdout.splitlines()[-1]))
            print(name, runs[name][-1]["per_trial"], file=sys.stderr, flush=True)

    def med(name: str, side: str, k: str) -> float:
        return round(statistics.median(x["per_trial"][k][side] for x in runs[name]), 1)

    keys = ("cpu_ms", "wall_ms", "threads")
    res = {"benchmark": "ray_node", "trials": trials, "repeats": repeats,
           "baseline_src": str(baseline), "loadavg": [round(x, 1) for x in os.getloadavg()],
           "payload_bytes": runs["this"][-1]["payload_bytes"],
           **{name: {k: {"node": med(name, "node", k), "local": med(name, "local", k),
                         "node_minus_local": round(med(name, "node", k) - med(name, "local", k), 1)}
                     for k in keys} for name in runs},
           # the node's own share, this code minus the baseline's, per repeat (back to back)
           "this_minus_baseline_node_cpu_ms_each_repeat": [
               round(a["per_trial"]["cpu_ms"]["node"] - b["per_trial"]["cpu_ms"]["node"], 1)
               for a, b in zip(runs["this"], runs["baseline"], strict=True)],
           "this_minus_baseline_node_wall_ms_each_repeat": [
               round(a["per_trial"]["wall_ms"]["node"] - b["per_trial"]["wall_ms"]["node"], 1)
               for a, b in zip(runs["this"], runs["baseline"], strict=True)]}
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--baseline-src", type=Path, default=None)
    args = ap.parse_args()
    n = args.trials
    if args.baseline_src is not None:
        ab(n, args.repeats, args.baseline_src.resolve())
        return
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

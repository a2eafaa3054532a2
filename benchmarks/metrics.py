"""Benchmark: AMS scoring with Eq. 1 calibration over synthetic trials.

1. 1,000,000 trial rows (100 configs × 10,000 tasks) built directly as arrays: score without
   CIs and with 1,000-resample bootstrap CIs;
2. loading a smaller run (default 100 configs × 1,000 tasks = 100,000 trials) from a real
   SQLite store with ``load_frame`` and scoring it.

Prints one JSON line at the end: seconds and peak memory (tracemalloc peak of numpy/Python
allocations, and the process's max RSS). Usage: python benchmarks/metrics.py [--store-tasks N]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from agentmeter.metrics import (
    ConfigInfo,
    ScoringSpec,
    TrialFrame,
    frame_from_arrays,
    load_frame,
    score,
)
from agentmeter.records import AgentSpec, ConfigRecord, ModelSpec, RunRecord
from agentmeter.store import schema as s
from agentmeter.store.db import Store


def synthetic(n_configs: int, n_tasks: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    skill = rng.random(n_configs)
    difficulty = rng.random(n_tasks)
    n = n_configs * n_tasks
    cfg = np.repeat(np.arange(n_configs), n_tasks)
    task = np.tile(np.arange(n_tasks), n_configs)
    p = 1 / (1 + np.exp(-6 * (skill[cfg] - difficulty[task])))
    passed = rng.random(n) < p
    status = np.where(passed, 0, rng.choice([1, 2, 3, 5], size=n, p=[0.8, 0.1, 0.07, 0.03]))
    tokens = np.exp(rng.normal(11 + 2 * difficulty[task], 0.8))
    cache_read = np.floor(tokens * 0.5)
    out = np.floor(tokens * 0.05)
    inp = np.floor(tokens) - out
    cost = (inp - cache_read) * 1e-6 + cache_read * 1e-7 + out * 4e-6
    return dict(config=cfg, task=task, status=status, reward=passed.astype(float),
                passed=passed.astype(float), input=inp, output=out, cache_read=cache_read,
                cache_creation=np.zeros(n), cost_usd=cost,
                turns=np.ceil(tokens / 20_000), tool_calls=np.ceil(tokens / 15_000))


def configs_for(n: int) -> list[ConfigInfo]:
    return [ConfigInfo(id=f"c{i:03d}", label=f"model{i // 4} x agent{i % 4}",
                       model=f"model{i // 4}", agent=f"agent{i % 4}", price_key="scripted/x")
            for i in range(n)]


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, seconds, peak MB): timed on a plain run, the peak from a second, traced run
    (tracemalloc slows allocation-heavy code several times over, so it never times)."""
    t0 = time.perf_counter()
    result = fn()
    secs = time.perf_counter() - t0
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, secs, peak


def write_store(path: Path, n_configs: int, n_tasks: int) -> str:
    cols = synthetic(n_configs, n_tasks, seed=1)
    store = Store.open(path)
    run_id = "bench"
    store.create_run(RunRecord(id=run_id, status="finished"))
    status_names = ("passed", "failed", "agent_error", "timeout", "budget_exceeded",
                    "infra_invalid")
    for c in configs_for(n_configs):
        store.upsert_config(ConfigRecord(id=c.id, label=c.label,
                                         model=ModelSpec(name=c.model, price_key=c.price_key),
                                         agent=AgentSpec(name=c.agent)), run_id)
    with store.engine.begin() as conn:
        conn.execute(sa.insert(s.tasks), [dict(id=f"t{j:05d}", digest="d", suite=None,
                                               tier=None, category=None, source=None, tags=[],
                                               path=None) for j in range(n_tasks)])
        conn.execute(sa.insert(s.run_tasks), [dict(run_id=run_id, task_id=f"t{j:05d}",
                                                   task_digest="d") for j in range(n_tasks)])
        now = datetime.now(UTC)
        rows = []
        for i in range(len(cols["config"])):
            c, t = int(cols["config"][i]), int(cols["task"][i])
            rows.append(dict(
                run_id=run_id, id=f"c{c:03d}:t{t:05d}:0", try_number=0, config_id=f"c{c:03d}",
                task_id=f"t{t:05d}", attempt=0, status=status_names[int(cols["status"][i])],
                reward=float(cols["reward"][i]), rewards={}, passed=bool(cols["passed"][i]),
                input_tokens=int(cols["input"][i]), output_tokens=int(cols["output"][i]),
                cache_creation_tokens=0, cache_read_tokens=int(cols["cache_read"][i]),
                cost_usd=float(cols["cost_usd"][i]), model_calls=int(cols["turns"][i]),
                tool_calls={"bash": int(cols["tool_calls"][i])}, turns=int(cols["turns"][i]),
                extra={}, updated_at=now))
            if len(rows) == 20_000:
                conn.execute(sa.insert(s.trials), rows)
                rows = []
        if rows:
            conn.execute(sa.insert(s.trials), rows)
    store.close()
    return run_id


def bench_arrays(args: argparse.Namespace, result: dict[str, Any]) -> None:
    def build() -> TrialFrame:
        cols = synthetic(args.configs, args.tasks)
        return frame_from_arrays(configs_for(args.configs),
                                 [f"t{j:05d}" for j in range(args.tasks)], **cols)

    frame, secs, peak = measure(build)
    result["build_frame_s"], result["build_frame_peak_mb"] = round(secs, 3), round(peak, 1)
    card, secs, peak = measure(lambda: score(frame))
    result["score_s"], result["score_peak_mb"] = round(secs, 3), round(peak, 1)
    card_ci, secs, peak = measure(lambda: score(frame, ScoringSpec(resamples=args.resamples)))
    result["score_ci_s"], result["score_ci_peak_mb"] = round(secs, 3), round(peak, 1)
    result["top_ams"] = card.winners.ams
    result["ci_example"] = card_ci.rows[0].ci["ams"].model_dump()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--store-tasks", type=int, default=1000)
    args = ap.parse_args()
    result: dict[str, Any] = {"rows": args.configs * args.tasks, "configs": args.configs,
                              "tasks": args.tasks, "resamples": args.resamples}

    bench_arrays(args, result)
    if args.store_tasks:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            run_id = write_store(Path(tmp), args.configs, args.store_tasks)
            result["store_rows"] = args.configs * args.store_tasks
            result["store_write_s"] = round(time.perf_counter() - t0, 3)
            store = Store.open(Path(tmp))
            loaded, secs, peak = measure(lambda: load_frame(store, run_id))
            result["store_load_s"], result["store_load_peak_mb"] = round(secs, 3), round(peak, 1)
            _, secs, _ = measure(lambda: score(loaded))
            result["store_score_s"] = round(secs, 3)
            store.close()
    result["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

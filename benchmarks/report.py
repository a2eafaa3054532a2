"""Benchmark: the HTML report and the viewer on a large store.

Builds a SQLite store with ``--trials`` (default 10,000) trials spread over ``--configs``
(default 24) configurations (6 models × 4 agents; tasks = trials / configs), each with
``--calls`` model calls (default 6), tool calls, a verifier log and an FS-diff artifact on disk;
about 5 % infra_invalid tries are retried. Rows are bulk-inserted through the store's schema
(setup, not measured). Then measures:

* ``write_html_report``: seconds and file size (targets: ≤ 10 s, ≤ 10 MB);
* the viewer (started in a thread): time to first page — the runs list, and the run's report
  page (scoring included, cold cache) — plus one trials page and one trial's JSON (target ≤ 1 s).

Prints one JSON line at the end. Usage: python benchmarks/report.py [--trials N] [--configs N]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agentmeter.records import (
    AgentSpec,
    ConfigRecord,
    ModelCallRecord,
    ModelSpec,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.report.html import write_html_report
from agentmeter.report.viewer import start_in_thread
from agentmeter.store import schema as s
from agentmeter.store.artifacts import safe_trial_name
from agentmeter.store.db import Store

MODELS = ["openai/gpt-5", "anthropic/claude-sonnet-4", "deepseek/deepseek-chat",
          "moonshot/kimi-k2", "zhipu/glm-4.6", "scripted/solver"]
AGENTS = ["codex", "claude-code", "native", "qwen-code"]
TOOLS = ["bash", "read_file", "write_file", "edit", "grep", "ls"]
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def build(root: Path, n_trials: int, n_configs: int, n_calls: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    store = Store.open(root)
    run_id = "bench"
    store.create_run(RunRecord(id=run_id, created_at=T0, status="finished"))
    n_tasks = max(1, n_trials // n_configs)
    tasks = [TaskRecord(id=f"task-{j:05d}", digest="d", tier=("easy", "medium", "hard")[j % 3],
                        suite="bench") for j in range(n_tasks)]
    configs = [ConfigRecord(id=f"cfg{c:02d}", label=f"{AGENTS[c % 4]} × {MODELS[c // 4 % 6]}",
                            model=ModelSpec(name=MODELS[c // 4 % 6]),
                            agent=AgentSpec(name=AGENTS[c % 4])) for c in range(n_configs)]
    trials: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    arts: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    run_dir = store.run_dir(run_id)
    for cfg in configs:
        skill = 0.3 + 0.6 * rng.random()
        for j, task in enumerate(tasks):
            tries = [TrialStatus.INFRA_INVALID] if rng.random() < 0.05 else []
            passed = rng.random() < skill * (1.0, 0.7, 0.4)[j % 3]
            tries.append(TrialStatus.PASSED if passed else rng.choice(
                [TrialStatus.FAILED, TrialStatus.FAILED, TrialStatus.TIMEOUT,
                 TrialStatus.AGENT_ERROR]))
            for k, status in enumerate(tries):
                tid = f"{cfg.id}:{task.id}:0"
                usage = TokenUsage()
                for q in range(n_calls):
                    u = TokenUsage(input=rng.randint(2000, 40000), output=rng.randint(100, 3000),
                                   cache_read=rng.randint(0, 20000), cache_creation=0)
                    usage = usage + u
                    calls.append(s.model_call_to_row(run_id, k, ModelCallRecord(
                        trial_id=tid, seq=q, wire_api="chat", client_api="chat",
                        model=cfg.model.name, upstream_model=cfg.model.name, status_code=200,
                        stream=True, started_at=T0, latency_s=1.5, ttft_s=0.3, usage=u,
                        cost_usd=(u.input or 0) * 1e-6 + (u.output or 0) * 8e-6,
                        bytes_in=9000, bytes_out=3000,
                        scripted=cfg.model.name.startswith("scripted/"))))
                rec = TrialRecord(
                    id=tid, run_id=run_id, config_id=cfg.id, task_id=task.id, attempt=0,
                    try_number=k, status=status, passed=None if status.name == "INFRA_INVALID"
                    else status is TrialStatus.PASSED, reward=float(status is TrialStatus.PASSED),
                    usage=usage, cost_usd=(usage.input or 0) * 1e-6 + (usage.output or 0) * 8e-6,
                    model_calls=n_calls, turns=n_calls,
                    tool_calls={t: rng.randint(1, 9) for t in rng.sample(TOOLS, 3)},
                    started_at=T0 + timedelta(seconds=j), finished_at=T0 + timedelta(seconds=j + 90),
                    error=None if status in (TrialStatus.PASSED, TrialStatus.FAILED)
                    else f"{status.value}: the agent stopped")
                trials.append(s.trial_to_row(rec, now))
                d = run_dir / "trials" / safe_trial_name(tid, k)
                d.mkdir(parents=True, exist_ok=True)
                log = (f"$ bash /tests/test.sh\n--- exit {0 if status is TrialStatus.PASSED else 1}"
                       f"\n--- stdout\n" + "".join(f"test_{i} ... {'ok' if passed else 'FAIL'}\n"
                                                    for i in range(12)))
                diff = json.dumps({"created": ["out.txt"], "modified": ["src/app.py"],
                                   "deleted": []})
                for name, kind, text in (("verifier.log", "verifier_output", log),
                                         ("fs_diff.json", "fs_diff", diff)):
                    (d / name).write_text(text)
                    arts.append({"run_id": run_id, "trial_id": tid, "try_number": k,
                                 "name": name, "kind": kind,
                                 "relpath": (d / name).relative_to(run_dir).as_posix(),
                                 "size": len(text)})
    with store.engine.begin() as conn:
        conn.execute(sa.insert(s.configs), [s.config_to_row(c) for c in configs])
        conn.execute(sa.insert(s.run_configs), [{"run_id": run_id, "config_id": c.id}
                                                for c in configs])
        conn.execute(sa.insert(s.tasks), [s.task_to_row(t) for t in tasks])
        conn.execute(sa.insert(s.run_tasks), [{"run_id": run_id, "task_id": t.id,
                                               "task_digest": t.digest} for t in tasks])
        conn.execute(sa.insert(s.trials), trials)
        conn.execute(sa.insert(s.model_calls), calls)
        conn.execute(sa.insert(s.artifacts), arts)
    store.close()
    return run_id


def fetch(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--configs", type=int, default=24)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    result: dict[str, Any] = {"benchmark": "report", "configs": args.configs}
    with tempfile.TemporaryDirectory(prefix="agentmeter-bench-report-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        run_id = build(root, args.trials, args.configs, args.calls)
        result["setup_s"] = round(time.perf_counter() - t0, 2)
        with Store.open(root) as store:
            with store.engine.connect() as conn:
                result["trial_rows"] = conn.execute(
                    sa.select(sa.func.count()).select_from(s.trials)).scalar_one()
                result["model_call_rows"] = conn.execute(
                    sa.select(sa.func.count()).select_from(s.model_calls)).scalar_one()
            t0 = time.perf_counter()
            path = write_html_report(store, [run_id], root / "report.html")
            result["html_s"] = round(time.perf_counter() - t0, 2)
            result["html_mb"] = round(path.stat().st_size / 1e6, 2)
            viewer = start_in_thread(store)
            try:
                for name, url in (("viewer_runs_page_s", "/"),
                                  ("viewer_report_page_s", f"/report?run={run_id}"),
                                  ("viewer_report_page_cached_s", f"/report?run={run_id}"),
                                  ("viewer_trials_page_s",
                                   f"/api/trials?run={run_id}&offset=5000&limit=50&sort=cost"),
                                  ("viewer_trial_s",
                                   f"/api/trial?run={run_id}&id=cfg05:task-00007:0")):
                    secs, size = fetch(viewer.url + url)
                    result[name] = round(secs, 3)
                    if name == "viewer_report_page_s":
                        result["viewer_report_page_kb"] = round(size / 1e3, 1)
            finally:
                viewer.stop()
    result["targets"] = {"html_s": 10, "html_mb": 10, "viewer_first_page_s": 1}
    result["ok"] = (result["html_s"] <= 10 and result["html_mb"] <= 10
                    and result["viewer_runs_page_s"] <= 1 and result["viewer_report_page_s"] <= 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

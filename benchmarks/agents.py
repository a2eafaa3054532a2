"""Installed agent CLIs: install, per-trial setup and start-up times.

Per CLI:
- ``install_s``: a fresh install (runtime layer + CLI layer) on a chain no cache has seen (a
  unique no-op layer under them), split into ``runtime_s`` and ``cli_s``; the fresh layers are
  deleted afterwards. ``--skip-install`` leaves this out.
- ``setup_s``: cached agent setup per trial: the runner's ``agent_setup`` phase plus the CLI's
  own setup (writing its config files in the sandbox), median over the trials.
- ``environment_s``: sandbox start with every layer cached (task environment + CLI), median.
- ``startup_s``: from the CLI's exec start to the gateway's first model call, median.
- ``trial_s``: the whole trial, median.

Trials are ``log-level-counts`` with ``scripted/quitter`` (one model call). Usage:
``python benchmarks/agents.py [--trials 3] [--skip-install] [--agents codex,kimi]``.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from agentmeter.agents.cli import DEFINITIONS
from agentmeter.agents.registry import make_agent
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerSpec, SandboxSpec
from agentmeter.store.db import Store

TASK = "log-level-counts"


async def fresh_install(backend: LocalBackend, agent_name: str) -> dict[str, float]:
    layers = make_agent(agent_name).layers()
    nonce = LayerSpec(kind="script", source=f"# benchmark nonce {secrets.token_hex(8)}\ntrue\n",
                      label="benchmark nonce")
    built: list[str] = []
    out: dict[str, float] = {}
    try:
        for key, upto in (("runtime_s", 1), ("cli_s", len(layers))):
            spec = SandboxSpec(layers=(nonce, *layers[:upto]))
            t0 = time.monotonic()
            lowers, _ = await backend.layers.resolve(spec)
            out[key] = round(time.monotonic() - t0, 2)
            built += [lw.split("/")[0] for lw in lowers[:-1]]
        out["install_s"] = round(out["runtime_s"] + out["cli_s"], 2)
    finally:
        for name in set(built):
            shutil.rmtree(backend.layers.dir / name, ignore_errors=True)
    return out


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


async def cached_trials(agent_name: str, trials: int, store_dir: Path) -> dict[str, object]:
    store = Store.open(store_dir)
    req = RunRequest(suites=["starter"], task_ids=[TASK], agents=[agent_name],
                     models=["scripted/quitter"], attempts=trials, concurrency=1,
                     max_infra_retries=0)
    prepared = prepare(req)
    await run(store, prepared)  # warm-up: builds anything missing, first-run caches
    rid, _ = await run(store, prepared)
    setup, env, startup, total, statuses = [], [], [], [], []
    for t in store.trials(rid):
        statuses.append(t.status.value)
        art = next((a for a in store.artifacts(rid, t.id, t.try_number)
                    if a.name == "trajectory.json"), None)
        traj = json.loads((store.run_dir(rid) / art.relpath).read_text()) if art else {}
        if t.timings.agent_setup is not None:
            setup.append(t.timings.agent_setup + float(traj.get("setup_s") or 0.0))
        if t.timings.environment is not None:
            env.append(t.timings.environment)
        calls = store.model_calls(rid, t.id)
        if calls and traj.get("started_at"):
            started = datetime.fromisoformat(str(traj["started_at"]))
            startup.append((min(c.started_at for c in calls) - started).total_seconds())
        if t.started_at and t.finished_at:
            total.append((t.finished_at - t.started_at).total_seconds())
    return {"setup_s": median(setup), "environment_s": median(env),
            "startup_s": median(startup), "trial_s": median(total), "statuses": statuses}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--skip-install", action="store_true")
    ap.add_argument("--agents", default=",".join(DEFINITIONS))
    args = ap.parse_args()
    backend = LocalBackend(progress=None)
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="agentmeter-bench-") as tmp:
        for name in args.agents.split(","):
            spec = DEFINITIONS[name].spec
            row: dict[str, object] = {"version": spec.default_version, "package": spec.package}
            if not args.skip_install:
                row |= await fresh_install(backend, name)
            row |= await cached_trials(name, args.trials, Path(tmp) / name)
            results[name] = row
            print(name, row, file=sys.stderr, flush=True)
    print(json.dumps({"benchmark": "agents", "task": TASK, "model": "scripted/quitter",
                      "trials": args.trials, "agents": results}))


if __name__ == "__main__":
    asyncio.run(main())

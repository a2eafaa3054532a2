"""Real agent CLIs against a model whose first token takes N seconds: requests per turn.

A fake upstream (the scripted model, ``quitter`` policy, Chat Completions only, marked
``local``) sends nothing, not even its response headers, until ``--delay`` seconds after each
request arrived (a slow local server that answers when its first token is ready); then it sends
the whole scripted reply. Each CLI (installed by agentmeter's own CLI installer, from its layer
cache) runs one starter task through the gateway, all CLIs at once, one model entry each (so
the upstream can tell them apart), the task's agent timeout set to ``2 * delay + 300`` s (two turns).

Per CLI: ``requests`` (what reached the upstream), ``turns`` (distinct request bodies: a
re-sent request repeats its body exactly), ``requests_per_turn``, ``resent`` (requests whose
body had been sent before), the gateway's stored ``model_calls`` of the trial and the trial's
status. Usage: ``python benchmarks/slow_first_token.py [--delay 400] [--agents codex,...]``.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from aiohttp import web

from agentmeter.gateway.scripted.policy import Policy
from agentmeter.gateway.scripted.server import make_app
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store

TASK = "log-level-counts"
AGENTS = ("codex", "claude-code", "qwen-code", "gemini-cli")
STARTER = Path(__file__).resolve().parents[1] / "src/agentmeter/tasks/suites/starter"


def slow_app(delay: float, arrived: list[tuple[float, bytes]]) -> web.Application:
    """``make_app`` behind a middleware that records each request (when, body) as it arrives
    and holds it ``delay`` s before its handler runs: no status, no headers, no byte until
    then (a request whose client hangs up meanwhile is cancelled, as a real server's)."""

    @web.middleware
    async def hold(request: web.Request, handler):  # type: ignore[no-untyped-def]
        arrived.append((time.monotonic(), await request.read()))
        await asyncio.sleep(delay)
        return await handler(request)

    app = make_app(Policy("quitter"), apis=("chat",))
    app.middlewares.append(hold)
    return app


def task_suite(tmp: Path, timeout_s: float) -> Path:
    suite = tmp / "suite"
    shutil.copytree(STARTER / TASK, suite / TASK)
    toml = suite / TASK / "task.toml"
    text = toml.read_text()
    toml.write_text(text.replace("timeout_sec = 600.0", f"timeout_sec = {timeout_s:.1f}", 1))
    return suite


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=400.0, help="seconds to the first byte")
    ap.add_argument("--agents", default=",".join(AGENTS))
    args = ap.parse_args()
    agents = args.agents.split(",")
    arrived: list[tuple[float, bytes]] = []
    runner = web.AppRunner(slow_app(args.delay, arrived), access_log=None,
                           handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentmeter-slowtok-") as tmpname:
        tmp = Path(tmpname)
        models = tmp / "models.toml"
        models.write_text("".join(
            f'[models."slow/{a}"]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
            f'wire_api = "chat"\nupstream_model = "slow-{a}"\nlocal = true\n'
            'price_key = "scripted/x"\n\n' for a in agents))
        suite = task_suite(tmp, 2 * args.delay + 300)
        store = Store.open(tmp / "runs")
        try:
            rid, _ = await run(store, prepare(RunRequest(
                suites=[str(suite)], task_ids=[TASK], pairs=[(a, f"slow/{a}") for a in agents],
                agents=[], models_file=str(models), concurrency=len(agents),
                max_infra_retries=0)))
        finally:
            await runner.cleanup()
        results: dict[str, dict[str, object]] = {}
        agent_of = {c.id: c.agent.name for c in store.run_configs(rid)}
        trials = {agent_of.get(t.config_id): t for t in store.trials(rid)}
        for a in agents:
            bodies = [hashlib.sha256(body).hexdigest() for _, body in arrived
                      if json.loads(body).get("model") == f"slow-{a}"]
            times = [round(at - t0, 1) for at, body in arrived
                     if json.loads(body).get("model") == f"slow-{a}"]
            seen = Counter(bodies)
            t = trials.get(a)
            calls = store.model_calls(rid, t.id) if t is not None else []
            results[a] = {
                "requests": len(bodies), "turns": len(seen),
                "requests_per_turn": round(len(bodies) / len(seen), 2) if seen else None,
                "resent": len(bodies) - len(seen), "arrived_s": times,
                "model_calls": len([c for c in calls if c.purpose == "agent"]),
                "call_errors": [c.error for c in calls if c.error],
                "status": t.status.value if t is not None else None,
                "trial_s": round((t.finished_at - t.started_at).total_seconds(), 1)
                if t is not None and t.started_at and t.finished_at else None}
            print(a, results[a], file=sys.stderr, flush=True)
    print(json.dumps({"benchmark": "slow_first_token", "task": TASK, "delay_s": args.delay,
                      "wall_s": round(time.monotonic() - t0, 1), "agents": results}))


if __name__ == "__main__":
    asyncio.run(main())

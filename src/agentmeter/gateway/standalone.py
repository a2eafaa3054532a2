"""``agentmeter gateway serve``: the metering gateway on its own, for any agent outside
agentmeter's runs. One session = one metered trial: point the agent at the printed base URL with
the printed token as its API key; every call is printed and, with ``out``, appended as JSONL."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from pathlib import Path

from agentmeter.gateway.metering import Budget, TrialMeter
from agentmeter.gateway.registry import ModelRegistry
from agentmeter.gateway.server import Gateway
from agentmeter.pricing import PriceBook


async def serve(model: str, *, host: str, port: int, models: ModelRegistry, prices: PriceBook,
                budget: Budget | None, out: Path | None, announce: Callable[[str, str], None],
                on_call: Callable[[str], None], stop: asyncio.Event) -> TrialMeter:
    gw = Gateway(models, prices)
    session = "serve-" + secrets.token_hex(4)
    # the user's own machine, not a task's sandbox: provider-hosted tools pass (docs/security.md)
    token = gw.open_trial(session, model, budget=budget,  # a bad model fails before listening
                          hosted_tools=True)
    try:
        await gw.start(host=host, port=port)
        await gw.start_local_models([model])  # local/<model>: its server, before the URL is shown
    except BaseException:
        await gw.stop()
        raise
    announce(gw.base_url, token)
    seen = 0
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
            meter = gw.trial_meter(session)
            for call in meter.calls[seen:]:
                u = call.usage
                on_call(f"#{call.seq} {call.client_api}→{call.wire_api} {call.upstream_model} "
                        f"{call.status_code} {call.latency_s * 1000:.0f} ms in={u.input} out={u.output} "
                        f"cache_write={u.cache_creation} cache_read={u.cache_read} "
                        f"usd={call.cost_usd if call.cost_usd is not None else 'n/a'}")
                if out is not None:
                    with out.open("a") as f:
                        f.write(call.model_dump_json() + "\n")
            seen = len(meter.calls)
    finally:
        final = gw.close_trial(session)
        await gw.stop()
    return final

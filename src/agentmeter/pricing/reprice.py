"""Recompute a stored run's costs under other pricing snapshots, without rerunning.

Model calls are repriced one by one (Eq. 2 on each call's stored usage) and a trial's cost is the
sum of its calls; a trial with usage but no stored calls is priced on its totals. Unmetered
trials (oracle, nop) keep their stored cost. A configuration the snapshots do not price is an
error unless ``allow_unpriced``, in which case its costs become n/a (never zero)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agentmeter.pricing.book import PriceBook
from agentmeter.pricing.snapshot import PricingSnapshot
from agentmeter.records import NO_MODEL, ConfigRecord, TokenUsage, TrialRecord
from agentmeter.store import queries
from agentmeter.store.db import Store


class RepriceError(ValueError):
    """Nothing was changed."""


class ConfigCost(BaseModel):
    config_id: str
    label: str
    usd_before: float | None
    usd_after: float | None


class RepriceResult(BaseModel):
    run_id: str
    pricing_snapshot: str
    trials: int
    model_calls: int
    unpriced: list[str]
    configs: list[ConfigCost]


def _price_key(config: ConfigRecord | None) -> str | None:
    if config is None:
        return None
    name = config.model.name
    return config.model.price_key or (name if name not in (NO_MODEL, "unknown") else None)


def _exposes(u: TokenUsage) -> bool:
    return any(v is not None for v in (u.input, u.output, u.cache_creation, u.cache_read))


def _metered(t: TrialRecord) -> bool:
    u = t.usage
    return bool(t.model_calls) or any(v is not None for v in
                                      (u.input, u.output, u.cache_creation, u.cache_read))


def reprice_run(store: Store, run_id: str, snapshots: Sequence[PricingSnapshot],
                files: Sequence[str], *, allow_unpriced: bool = False) -> RepriceResult:
    run = store.get_run(run_id)
    if run is None:
        raise RepriceError(f"no run {run_id!r}")
    book = PriceBook(snapshots, use_genai_prices=False)
    configs = {c.id: c for c in store.run_configs(run_id)}
    trials = store.trials(run_id)
    unpriced = sorted({f"{configs[t.config_id].label} ({_price_key(configs[t.config_id]) or 'no price key'})"
                       for t in trials if t.config_id in configs and _metered(t)
                       and book.quote(_price_key(configs[t.config_id]) or "") is None})
    if unpriced and not allow_unpriced:
        raise RepriceError(f"no price for {', '.join(unpriced)}; nothing was changed "
                           "(--allow-unpriced stores n/a costs for them)")
    call_costs: dict[tuple[str, int, int], float | None] = {}
    trial_costs: dict[tuple[str, int], float | None] = {}
    before: dict[str, float | None] = {}
    after: dict[str, float | None] = {}
    stored_calls = queries.call_usage_by_try(store, run_id)
    for t in trials:
        key = _price_key(configs.get(t.config_id))
        priced = key is not None and book.quote(key) is not None
        mine = stored_calls.get((t.id, t.try_number), [])
        for seq, usage in mine:
            call_costs[(t.id, t.try_number, seq)] = book.cost_usd(key, usage) if priced else None
        if mine:
            costs = [call_costs[(t.id, t.try_number, s)] for s, u in mine if _exposes(u)]
            # n/a once a call with usage has no cost (cache tokens without a cache price)
            new = (sum(c or 0.0 for c in costs) if priced and None not in costs else None)
        elif _metered(t):
            new = book.cost_usd(key, t.usage) if priced else None
        else:
            continue  # nothing metered (e.g. oracle): the stored cost stays
        trial_costs[(t.id, t.try_number)] = new
        for totals, v in ((before, t.cost_usd), (after, new)):  # n/a once any part is n/a
            prev = totals.get(t.config_id, 0.0)
            totals[t.config_id] = None if prev is None or v is None else prev + v
    name = " + ".join(s.label or Path(s.source or "snapshot").name for s in snapshots)
    history = list(run.settings.get("repricing", []))
    history.append({"snapshot": name, "files": list(files),
                    "dates": [str(s.date) for s in snapshots], "previous": run.pricing_snapshot,
                    "at": datetime.now(UTC).isoformat()})
    store.reprice_run(run_id, trial_costs, call_costs, name, {**run.settings, "repricing": history})
    return RepriceResult(
        run_id=run_id, pricing_snapshot=name, trials=len(trial_costs), model_calls=len(call_costs),
        unpriced=unpriced,
        configs=[ConfigCost(config_id=c, label=configs[c].label if c in configs else c,
                            usd_before=before[c], usd_after=after[c]) for c in sorted(before)])

"""Billable cost C_i (AgentMeter Eq. 2), vectorised over a frame.

N = max(X − A − H, 0);  C = p_in·N + p_out·Y + p_create·A + p_hit·H, converted to USD with the
pricing snapshot's fixed rate. Components a trajectory does not expose (NaN) are not imputed:
they contribute nothing and are not subtracted; a row exposing no component has no cost (NaN).
This is the same rule as :func:`agentmeter.pricing.cost`, on arrays.

A stored ``cost_usd`` is used as is unless ``reprice=True``; rows without one are priced from
their usage and the configuration's price key. Rates are looked up once per price key at the
base tier (tiered provider prices depend on per-call input sizes that a trial total hides).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmeter.metrics.frame import FloatArray, TrialFrame
from agentmeter.pricing import ModelRates, PriceBook
from agentmeter.records import NO_MODEL


@dataclass(frozen=True)
class UsdRates:
    """USD per token (already divided by a million and converted to USD). A cache rate of
    ``None`` is a price the entry does not have: rows with such tokens cost NaN (n/a)."""

    input: float
    output: float
    cache_write: float | None
    cache_read: float | None

    @classmethod
    def from_model_rates(cls, rates: ModelRates, usd_per_unit: float = 1.0) -> UsdRates:
        """Missing cache rates stay ``None``, or become the input rate when the entry chose
        ``cache_price_fallback = "input"``."""
        def per_token(x: object) -> float:
            return float(x) * usd_per_unit / 1_000_000  # type: ignore[arg-type]

        fallback = rates.input if rates.cache_price_fallback == "input" else None

        def cache(v: object) -> float | None:
            v = v if v is not None else fallback
            return None if v is None else per_token(v)

        return cls(input=per_token(rates.input), output=per_token(rates.output),
                   cache_write=cache(rates.cache_write), cache_read=cache(rates.cache_read))


def billable_cost(rates: UsdRates, x: FloatArray, y: FloatArray, a: FloatArray,
                  h: FloatArray) -> FloatArray:
    """Eq. 2 on arrays of input (incl. cached) X, output Y, cache-creation A, cache-hit H."""
    x, y, a, h = (np.asarray(v, dtype=np.float64) for v in (x, y, a, h))
    a0, h0, y0 = (np.nan_to_num(v, nan=0.0) for v in (a, h, y))
    n = np.where(np.isnan(x), 0.0, np.maximum(np.nan_to_num(x, nan=0.0) - a0 - h0, 0.0))
    c = (rates.input * n + rates.output * y0 + (rates.cache_write or 0.0) * a0
         + (rates.cache_read or 0.0) * h0)
    nothing = np.isnan(x) & np.isnan(y) & np.isnan(a) & np.isnan(h)
    unpriced = (((a0 > 0) & (rates.cache_write is None))
                | ((h0 > 0) & (rates.cache_read is None)))
    return np.where(nothing | unpriced, np.nan, c)


def _cache_notes(label: str, source: str, rates: ModelRates, a: FloatArray,
                 h: FloatArray) -> list[str]:
    """Say how the cache tokens an entry has no price for were billed (never silently)."""
    missing = [name for name, v, rate in (("cache-creation", a, rates.cache_write),
                                           ("cache-read", h, rates.cache_read))
               if rate is None and bool((np.nan_to_num(v, nan=0.0) > 0).any())]
    if not missing:
        return []
    what = " and ".join(missing)
    trials = int(((np.nan_to_num(a, nan=0.0) > 0) & (rates.cache_write is None)
                  | (np.nan_to_num(h, nan=0.0) > 0) & (rates.cache_read is None)).sum())
    if rates.cache_price_fallback == "input":
        return [f"{label}: {source} has no {what} price; {trials} trial(s)' {what} tokens are "
                "billed at the input rate (cache_price_fallback = input)"]
    return [f"{label}: {source} has no {what} price; {trials} trial(s) with {what} tokens "
            "cost n/a (cache_price_fallback = input bills them as input)"]


@dataclass(frozen=True)
class CostResolution:
    cost_usd: FloatArray
    notes: list[str]
    unpriced_configs: list[str]


def resolve_costs(frame: TrialFrame, book: PriceBook | None = None, *,
                  reprice: bool = False) -> CostResolution:
    """C_i for every row: the stored cost, or Eq. 2 from usage under ``book``."""
    cost = frame.cost_usd.copy()
    notes: list[str] = []
    unpriced: list[str] = []
    need = np.ones(len(frame), dtype=np.bool_) if reprice else np.isnan(cost)
    if reprice:
        cost[:] = np.nan
    if not need.any():
        return CostResolution(cost, notes, unpriced)
    if book is None:
        notes.append(f"{int(need.sum())} trial(s) have no stored cost and no price book was "
                     "given: their cost is n/a")
        return CostResolution(cost, notes, unpriced)
    fake_sources: set[str] = set()
    unpriced_keys: list[str] = []
    for ci, info in enumerate(frame.configs):
        rows = need & (frame.config == ci)
        if not rows.any() or info.model == NO_MODEL:  # oracle, nop: no model, nothing to price
            continue
        quote = book.quote(info.price_key) if info.price_key else None
        if quote is None:
            unpriced.append(info.id)
            unpriced_keys.append(f"{info.id} ({info.price_key or 'no price key'})")
            continue
        if quote.fake:
            fake_sources.add(quote.source)
        rates = UsdRates.from_model_rates(quote.rates, quote.usd_per_unit)
        cost[rows] = billable_cost(rates, frame.input[rows], frame.output[rows],
                                   frame.cache_creation[rows], frame.cache_read[rows])
        notes.extend(_cache_notes(info.label, quote.source, quote.rates,
                                  frame.cache_creation[rows], frame.cache_read[rows]))
    if unpriced:
        notes.append("no price for " + ", ".join(sorted(unpriced_keys))
                     + ": their unpriced trials' cost is n/a")
    for src in sorted(fake_sources):
        notes.append(f"costs priced with FAKE prices ({src})")
    if reprice:
        notes.append("costs repriced from stored usage under the given pricing snapshot")
    return CostResolution(cost, notes, unpriced)

"""The AgentMeter cost formula (Eq. 2), exactly.

N = max(X − A − H, 0);  C = p_in·N + p_out·Y + p_create·A + p_hit·H
X input including cached, Y output, A cache creation, H cache read. Components the usage does not
expose (``None``) are not imputed: they contribute nothing and are not subtracted.

A price entry without a cache rate (p_create or p_hit) cannot price cache tokens: a call that
has some (A > 0 or H > 0) costs n/a (``None``), never a guess — the paper: "When a cache
component is not verifiably exposed by a trajectory format, it is not imputed". The named
option ``cache_price_fallback = "input"`` (a price entry's, a snapshot's, or the PriceBook's)
bills them at the input rate instead; whoever shows such a cost says so
(:func:`cache_fallback_used`). A USD budget is charged :func:`charge_bound` for a call whose
cost is n/a, so an unpriced cache token never passes as free.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.records import TokenUsage

MILLION = Decimal(1_000_000)

#: how cache tokens without a cache price are billed: None = they make the cost n/a
CacheFallback = Literal["input"]
CACHE_FALLBACKS: tuple[str, ...] = ("none", "input")


class ModelRates(BaseModel):
    """Prices per million tokens in the snapshot's currency.

    ``cache_write`` / ``cache_read`` missing: the entry cannot price those tokens (the cost of a
    call with some is n/a) unless ``cache_price_fallback = "input"`` says to bill them as input.
    """

    model_config = ConfigDict(extra="forbid")

    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cache_write: Decimal | None = Field(default=None, ge=0)
    cache_read: Decimal | None = Field(default=None, ge=0)
    cache_price_fallback: CacheFallback | None = Field(
        default=None, description="'input': bill cache tokens without a cache price as input "
        "(an explicit choice, shown wherever such a cost is)")


def unpriced_cache(rates: ModelRates, usage: TokenUsage) -> list[str]:
    """The cache components ``usage`` has (> 0) that ``rates`` has no price for."""
    out = []
    if (usage.cache_creation or 0) > 0 and rates.cache_write is None:
        out.append("cache_creation")
    if (usage.cache_read or 0) > 0 and rates.cache_read is None:
        out.append("cache_read")
    return out


def cache_fallback_used(rates: ModelRates, usage: TokenUsage) -> bool:
    """Whether pricing ``usage`` bills some cache tokens at the fallback (input) rate."""
    return rates.cache_price_fallback is not None and bool(unpriced_cache(rates, usage))


def _eq2(rates: ModelRates, usage: TokenUsage, p_create: Decimal, p_hit: Decimal) -> Decimal:
    x, y, a, h = usage.input, usage.output, usage.cache_creation, usage.cache_read
    n = max((x or 0) - (a or 0) - (h or 0), 0) if x is not None else 0
    total = rates.input * n + rates.output * (y or 0) + p_create * (a or 0) + p_hit * (h or 0)
    return total / MILLION


def _nothing(usage: TokenUsage) -> bool:
    return usage.input is None and usage.output is None and usage.cache_creation is None \
        and usage.cache_read is None


def cost(rates: ModelRates, usage: TokenUsage) -> Decimal | None:
    """Eq. 2 in the rates' currency; ``None`` when the usage exposes no component at all, or
    has cache tokens the rates cannot price (and no fallback is chosen)."""
    if _nothing(usage):
        return None
    if unpriced_cache(rates, usage) and rates.cache_price_fallback is None:
        return None
    p_create = rates.cache_write if rates.cache_write is not None else rates.input
    p_hit = rates.cache_read if rates.cache_read is not None else rates.input
    return _eq2(rates, usage, p_create, p_hit)


def charge_bound(rates: ModelRates, usage: TokenUsage) -> Decimal | None:
    """What a USD budget is charged: :func:`cost`, or when that is n/a for want of a cache price,
    Eq. 2 with each unpriced cache component at max(p_in, p_out) — no provider bills cached
    tokens above its output rate, so the budget is never charged less than the true cost."""
    exact = cost(rates, usage)
    if exact is not None or _nothing(usage):
        return exact
    top = max(rates.input, rates.output)
    return _eq2(rates, usage, rates.cache_write if rates.cache_write is not None else top,
                rates.cache_read if rates.cache_read is not None else top)

"""The AgentMeter cost formula (Eq. 2), exactly.

N = max(X − A − H, 0);  C = p_in·N + p_out·Y + p_create·A + p_hit·H
X input including cached, Y output, A cache creation, H cache read. Components the usage does not
expose (``None``) are not imputed: they contribute nothing and are not subtracted.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.records import TokenUsage

MILLION = Decimal(1_000_000)


class ModelRates(BaseModel):
    """Prices per million tokens in the snapshot's currency.

    A missing ``cache_write`` or ``cache_read`` rate means the provider bills those tokens as
    ordinary input, so the input rate applies.
    """

    model_config = ConfigDict(extra="forbid")

    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cache_write: Decimal | None = Field(default=None, ge=0)
    cache_read: Decimal | None = Field(default=None, ge=0)


def cost(rates: ModelRates, usage: TokenUsage) -> Decimal | None:
    """Eq. 2 in the rates' currency; ``None`` when the usage exposes no component at all."""
    x, y, a, h = usage.input, usage.output, usage.cache_creation, usage.cache_read
    if x is None and y is None and a is None and h is None:
        return None
    n = max((x or 0) - (a or 0) - (h or 0), 0) if x is not None else 0
    p_create = rates.cache_write if rates.cache_write is not None else rates.input
    p_hit = rates.cache_read if rates.cache_read is not None else rates.input
    total = (rates.input * n + rates.output * (y or 0) + p_create * (a or 0) + p_hit * (h or 0))
    return total / MILLION

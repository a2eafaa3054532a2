"""PriceBook: which rates apply to a price key, and what a usage record costs in USD.

Lookup order: the pricing snapshots given (later ones win), then genai-prices' bundled table.
Price keys are ``provider/model`` (``openai/gpt-5``), ``provider:model`` or a bare model name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentmeter.pricing.formula import ModelRates, cost
from agentmeter.pricing.snapshot import PricingError, PricingSnapshot, scripted_snapshot
from agentmeter.records import TokenUsage

#: our provider names → genai-prices provider ids
_PROVIDER_ALIASES = {"moonshot": "moonshotai", "kimi": "moonshotai", "zhipu": "zhipuai",
                     "glm": "zhipuai", "z-ai": "zai", "gemini": "google"}


class UnpricedModelError(PricingError):
    pass


@dataclass(frozen=True)
class PriceQuote:
    rates: ModelRates
    usd_per_unit: float
    source: str  # snapshot label/file or "genai-prices"
    fake: bool


def _decimal(value: Any, input_tokens: int) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value
    base = getattr(value, "base", None)
    if isinstance(base, Decimal):  # TieredPrices: the whole call pays the tier it reaches
        price = base
        for tier in getattr(value, "tiers", []):
            if input_tokens >= tier.start:
                price = tier.price
        return price
    return None


def _genai_rates(price_key: str, input_tokens: int) -> ModelRates | None:
    from genai_prices import data_snapshot

    snap = data_snapshot.get_snapshot()
    provider, sep, model = price_key.replace(":", "/", 1).partition("/")
    attempts: list[tuple[str, str | None]] = []
    if sep:
        attempts.append((model, _PROVIDER_ALIASES.get(provider, provider)))
    attempts.append((price_key, None))
    if sep:
        attempts.append((model, None))
    for ref, pid in attempts:
        try:
            _, info = snap.find_provider_model(ref, None, pid, None)
        except LookupError:
            continue
        prices = info.get_prices(datetime.now(UTC))
        p_in = _decimal(getattr(prices, "input_mtok", None), input_tokens)
        p_out = _decimal(getattr(prices, "output_mtok", None), input_tokens)
        if p_in is None or p_out is None:
            continue
        return ModelRates(input=p_in, output=p_out,
                          cache_write=_decimal(getattr(prices, "cache_write_mtok", None),
                                               input_tokens),
                          cache_read=_decimal(getattr(prices, "cache_read_mtok", None),
                                              input_tokens))
    return None


class PriceBook:
    def __init__(self, snapshots: Sequence[PricingSnapshot] = (), *,
                 use_genai_prices: bool = True, include_scripted: bool = True) -> None:
        self.snapshots = ([scripted_snapshot()] if include_scripted else []) + list(snapshots)
        self.use_genai_prices = use_genai_prices

    @classmethod
    def load(cls, paths: Iterable[Path], *, use_genai_prices: bool = True) -> PriceBook:
        return cls([PricingSnapshot.load(p) for p in paths], use_genai_prices=use_genai_prices)

    def quote(self, price_key: str, input_tokens: int = 0) -> PriceQuote | None:
        for snap in reversed(self.snapshots):
            rates = snap.rates(price_key)
            if rates is not None:
                return PriceQuote(rates, snap.usd_per_unit, snap.label or snap.source or "snapshot",
                                  snap.fake)
        if self.use_genai_prices:
            rates = _genai_rates(price_key, input_tokens)
            if rates is not None:
                return PriceQuote(rates, 1.0, "genai-prices", False)
        return None

    def cost_usd(self, price_key: str | None, usage: TokenUsage) -> float | None:
        """Eq. 2 cost in USD at the snapshot's fixed rate.

        ``None`` when the model is unpriced or the usage exposes nothing.
        """
        if price_key is None:
            return None
        quote = self.quote(price_key, usage.input or 0)
        if quote is None:
            return None
        amount = cost(quote.rates, usage)
        if amount is None:
            return None
        return float(amount * Decimal(str(quote.usd_per_unit)))

    def require(self, price_keys: Iterable[str | None], *, allow_unpriced: bool = False) -> None:
        """Fail before a run when a model has no price (unless allowed)."""
        if allow_unpriced:
            return
        missing = sorted({k or "<no price_key>" for k in price_keys
                          if k is None or self.quote(k) is None})
        if missing:
            raise UnpricedModelError(
                "no price for " + ", ".join(missing)
                + ": add it to a pricing snapshot file or allow unpriced models")

"""PriceBook: which rates apply to a price key, and what a usage record costs in USD.

Lookup order: the pricing snapshots given (later ones win), then the shipped ones (the scripted
model's fake prices, ``local/*`` at zero), then genai-prices' bundled table.
Price keys are ``provider/model`` (``openai/gpt-5``), ``provider:model`` or a bare model name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentmeter.pricing.formula import MILLION, CacheFallback, ModelRates, charge_bound, cost
from agentmeter.pricing.snapshot import (
    PricingError,
    PricingSnapshot,
    local_snapshot,
    scripted_snapshot,
)
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
    """``cache_price_fallback``: the fallback for entries (of any source, genai-prices
    included) that set none themselves; ``None`` keeps cache tokens without a price n/a."""

    def __init__(self, snapshots: Sequence[PricingSnapshot] = (), *,
                 use_genai_prices: bool = True, include_scripted: bool = True,
                 cache_price_fallback: CacheFallback | None = None) -> None:
        self.snapshots = (([scripted_snapshot()] if include_scripted else []) + [local_snapshot()]
                          + list(snapshots))
        self.use_genai_prices = use_genai_prices
        self.cache_price_fallback = cache_price_fallback
        #: a key's quote from the snapshots, found once (the gateway prices every call): the
        #: snapshots are fixed once loaded; genai-prices' rates (tiered, dated) are not kept
        self._snapshot_quotes: dict[str, PriceQuote | None] = {}

    @classmethod
    def load(cls, paths: Iterable[Path], *, use_genai_prices: bool = True,
             cache_price_fallback: CacheFallback | None = None) -> PriceBook:
        return cls([PricingSnapshot.load(p) for p in paths], use_genai_prices=use_genai_prices,
                   cache_price_fallback=cache_price_fallback)

    def _from_snapshots(self, price_key: str) -> PriceQuote | None:
        if price_key in self._snapshot_quotes:
            return self._snapshot_quotes[price_key]
        found: PriceQuote | None = None
        for snap in reversed(self.snapshots):
            rates = snap.rates(price_key)
            if rates is not None:
                found = PriceQuote(rates, snap.usd_per_unit,
                                   snap.label or snap.source or "snapshot", snap.fake)
                break
        if len(self._snapshot_quotes) < 4096:  # bounded: keys come from configs, not callers
            self._snapshot_quotes[price_key] = found
        return found

    def quote(self, price_key: str, input_tokens: int = 0) -> PriceQuote | None:
        found = self._from_snapshots(price_key)
        if found is None and self.use_genai_prices:
            rates = _genai_rates(price_key, input_tokens)
            if rates is not None:
                found = PriceQuote(rates, 1.0, "genai-prices", False)
        if (found is not None and self.cache_price_fallback is not None
                and found.rates.cache_price_fallback is None):
            found = replace(found, rates=found.rates.model_copy(
                update={"cache_price_fallback": self.cache_price_fallback}))
        return found

    def _usd(self, price_key: str | None, usage: TokenUsage,
             formula: Callable[[ModelRates, TokenUsage], Decimal | None]) -> float | None:
        if price_key is None:
            return None
        quote = self.quote(price_key, usage.input or 0)
        if quote is None:
            return None
        amount = formula(quote.rates, usage)
        if amount is None:
            return None
        if quote.usd_per_unit == 1.0:  # prices in USD (the gateway prices every call)
            return float(amount)
        return float(amount * Decimal(str(quote.usd_per_unit)))

    def cost_usd(self, price_key: str | None, usage: TokenUsage) -> float | None:
        """Eq. 2 cost in USD at the snapshot's fixed rate.

        ``None`` when the model is unpriced, the usage exposes nothing, or it has cache tokens
        the entry has no price for (and no fallback is chosen).
        """
        return self._usd(price_key, usage, cost)

    def charge_usd(self, price_key: str | None, usage: TokenUsage) -> float | None:
        """What a USD budget is charged for ``usage``: :meth:`cost_usd`, or when that is n/a for
        want of a cache price, the upper bound :func:`~agentmeter.pricing.formula.charge_bound`.
        ``None`` only when the model is unpriced or the usage exposes nothing."""
        return self._usd(price_key, usage, charge_bound)

    def max_charge_usd(self, price_key: str | None, tokens: int,
                       input_tokens: int = 0) -> float | None:
        """An upper bound of what ``tokens`` tokens of any kind can cost (a call's worst case,
        reserved against a USD budget): all at the entry's highest rate. ``None`` when
        unpriced."""
        quote = self.quote(price_key, input_tokens) if price_key is not None else None
        if quote is None:
            return None
        r = quote.rates
        top = max(r.input, r.output, r.cache_write or 0, r.cache_read or 0)
        return float(top * tokens / MILLION * Decimal(str(quote.usd_per_unit)))

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

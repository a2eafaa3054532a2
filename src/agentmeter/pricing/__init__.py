"""agentmeter.pricing: price tables and the AgentMeter cost formula (Eq. 2)."""

from agentmeter.pricing.book import PriceBook, PriceQuote, UnpricedModelError
from agentmeter.pricing.formula import (
    CACHE_FALLBACKS,
    CacheFallback,
    ModelRates,
    cache_fallback_used,
    charge_bound,
    cost,
    unpriced_cache,
)
from agentmeter.pricing.snapshot import PricingError, PricingSnapshot, scripted_snapshot

__all__ = ["CACHE_FALLBACKS", "CacheFallback", "ModelRates", "cache_fallback_used",
           "charge_bound", "unpriced_cache", "PriceBook", "PriceQuote", "PricingError", "PricingSnapshot",
           "UnpricedModelError", "cost", "scripted_snapshot"]

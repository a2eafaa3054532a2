"""agentmeter.pricing: price tables and the AgentMeter cost formula (Eq. 2)."""

from typing import TYPE_CHECKING

from agentmeter.lazy import lazy_exports

# The names below are imported on first use (PEP 562), not with the package: a submodule
# (``agentmeter.pricing.<module>``) imports without the others, and the command
# line starts without numpy, SQLAlchemy or aiohttp (tests/test_cli_start.py).
if TYPE_CHECKING:
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
    from agentmeter.pricing.snapshot import (
        PricingError,
        PricingSnapshot,
        local_snapshot,
        scripted_snapshot,
    )

#: name -> the module that defines it
_LAZY: dict[str, str] = {name: module for module, names in {
    "agentmeter.pricing.book": ("PriceBook", "PriceQuote", "UnpricedModelError"),
    "agentmeter.pricing.formula": (
        "CACHE_FALLBACKS", "CacheFallback", "ModelRates", "cache_fallback_used", "charge_bound",
        "cost", "unpriced_cache",
    ),
    "agentmeter.pricing.snapshot": ("PricingError", "PricingSnapshot", "local_snapshot",
                                    "scripted_snapshot"),
}.items() for name in names}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = ["CACHE_FALLBACKS", "CacheFallback", "ModelRates", "cache_fallback_used",
           "charge_bound", "unpriced_cache", "PriceBook", "PriceQuote", "PricingError", "PricingSnapshot",
           "UnpricedModelError", "cost", "local_snapshot", "scripted_snapshot"]

"""agentmeter.pricing: price tables and the AgentMeter cost formula (Eq. 2)."""

from agentmeter.pricing.book import PriceBook, PriceQuote, UnpricedModelError
from agentmeter.pricing.formula import ModelRates, cost
from agentmeter.pricing.snapshot import PricingError, PricingSnapshot, scripted_snapshot

__all__ = ["ModelRates", "PriceBook", "PriceQuote", "PricingError", "PricingSnapshot",
           "UnpricedModelError", "cost", "scripted_snapshot"]

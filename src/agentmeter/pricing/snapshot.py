"""Pricing snapshot files: a dated, fixed price table that overrides genai-prices.

```toml
date = "2025-06-01"
currency = "CNY"
usd_per_unit = 0.14          # fixed exchange rate: 1 CNY = 0.14 USD
label = "DeepSeek list prices"
fake = false                 # true for made-up prices (the scripted model's)

[models."deepseek/deepseek-chat"]   # a price key; '*' wildcards allowed
input = 2.0                  # per million tokens, in `currency`
output = 8.0
cache_read = 0.5             # optional; cache_write optional
# cache_price_fallback = "input"   # optional, here or per entry: bill cache tokens of an entry
                                   # without a cache price as input (else their cost is n/a)
```
"""

from __future__ import annotations

import fnmatch
from datetime import date
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.pricing.formula import CacheFallback, ModelRates
from agentmeter.tomlfile import read_toml, validate_toml


class PricingError(ValueError):
    pass


class PricingSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    date: date
    currency: str = "USD"
    usd_per_unit: float = Field(default=1.0, gt=0, description="fixed exchange rate to USD")
    label: str = ""
    fake: bool = False
    cache_price_fallback: CacheFallback | None = Field(
        default=None, description="applies to the entries that do not set their own")
    models: dict[str, ModelRates] = Field(default_factory=dict)
    source: str | None = Field(default=None, description="file it was loaded from")

    @classmethod
    def load(cls, path: Path) -> PricingSnapshot:
        data = read_toml(path, PricingError)
        if data.get("currency", "USD") == "USD" and "usd_per_unit" not in data:
            data["usd_per_unit"] = 1.0
        return validate_toml(cls, {**data, "source": str(path)}, path, PricingError)

    def rates(self, price_key: str) -> ModelRates | None:
        found = self.models.get(price_key)
        if found is None:
            found = next((rates for pattern, rates in self.models.items()
                          if "*" in pattern and fnmatch.fnmatchcase(price_key, pattern)), None)
        if found is not None and found.cache_price_fallback is None and self.cache_price_fallback:
            return found.model_copy(update={"cache_price_fallback": self.cache_price_fallback})
        return found


SHIPPED_DIR = Path(__file__).parent / "snapshots"


def scripted_snapshot() -> PricingSnapshot:
    """The fixed, fake price of the scripted test double."""
    return PricingSnapshot.load(SHIPPED_DIR / "scripted-fake.toml")


def local_snapshot() -> PricingSnapshot:
    """The zero price of ``local/*`` models (served on this machine: no API fees)."""
    return PricingSnapshot.load(SHIPPED_DIR / "local-zero.toml")

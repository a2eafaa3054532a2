"""Pricing: Eq. 2 by hand, snapshot files, currency conversion, genai-prices fallback."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.pricing import (
    ModelRates,
    PriceBook,
    PricingError,
    PricingSnapshot,
    UnpricedModelError,
    cost,
    scripted_snapshot,
)
from agentmeter.records import TokenUsage

RATES = ModelRates(input=Decimal("3"), output=Decimal("15"), cache_write=Decimal("3.75"),
                   cache_read=Decimal("0.3"))


def test_eq2_by_hand() -> None:
    # X=10_000 (incl. cached), A=2_000, H=5_000 → N=3_000; Y=1_000
    # C = 3·3000 + 15·1000 + 3.75·2000 + 0.3·5000 = 9000+15000+7500+1500 = 33000 per 1e6
    u = TokenUsage(input=10_000, output=1_000, cache_creation=2_000, cache_read=5_000)
    assert cost(RATES, u) == Decimal("0.033")


def test_uncached_input_never_negative() -> None:
    # an upstream reporting more cached than input: N = max(X − A − H, 0) = 0
    u = TokenUsage(input=100, output=0, cache_creation=80, cache_read=80)
    assert cost(RATES, u) == (Decimal("3.75") * 80 + Decimal("0.3") * 80) / 1_000_000


def test_unexposed_components_are_not_imputed() -> None:
    # OpenAI-style: no cache creation reported → N = X − H, nothing charged for A
    u = TokenUsage(input=1_000, output=100, cache_read=400)
    assert cost(RATES, u) == (Decimal(3) * 600 + Decimal(15) * 100 + Decimal("0.3") * 400) / 10**6
    assert cost(RATES, TokenUsage(output=1_000)) == Decimal("0.015")
    assert cost(RATES, TokenUsage()) is None


def test_missing_cache_rates_make_the_cost_na_unless_a_fallback_is_chosen() -> None:
    # was: billed as input without a word; now n/a (Eq. 2 does not impute), or input by choice
    plain = ModelRates(input=Decimal(2), output=Decimal(8))
    u = TokenUsage(input=1_000, output=0, cache_creation=100, cache_read=300)
    assert cost(plain, u) is None
    chosen = ModelRates(input=Decimal(2), output=Decimal(8), cache_price_fallback="input")
    assert cost(chosen, u) == Decimal(2) * 1_000 / 10**6  # tests/test_pricing_cache.py: more


def write(tmp_path: Path, text: str, name: str = "snap.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_snapshot_overrides_genai_prices_with_fixed_exchange_rate(tmp_path: Path) -> None:
    snap = write(tmp_path, """
date = "2025-06-01"
currency = "CNY"
usd_per_unit = 0.14
label = "DeepSeek CNY list"
[models."deepseek/deepseek-chat"]
input = 2.0
output = 8.0
cache_read = 0.5
""")
    book = PriceBook.load([snap])
    u = TokenUsage(input=1_000_000, output=500_000, cache_read=200_000)
    # CNY: 2·0.8 + 8·0.5 + 0.5·0.2 = 1.6 + 4 + 0.1 = 5.7 CNY → × 0.14 = 0.798 USD
    assert book.cost_usd("deepseek/deepseek-chat", u) == pytest.approx(0.798, abs=1e-12)
    assert PriceBook().cost_usd("deepseek/deepseek-chat", u) != book.cost_usd(
        "deepseek/deepseek-chat", u)  # genai-prices' default differs


def test_genai_prices_is_the_default_table() -> None:
    book = PriceBook()
    quote = book.quote("openai/gpt-4o")
    assert quote is not None and quote.source == "genai-prices" and not quote.fake
    u = TokenUsage(input=1_000_000, output=1_000_000, cache_read=0)
    assert book.cost_usd("openai/gpt-4o", u) == pytest.approx(
        float(quote.rates.input + quote.rates.output))
    assert book.quote("anthropic/claude-sonnet-4-5") is not None


def test_scripted_models_have_a_fake_labelled_price() -> None:
    snap = scripted_snapshot()
    assert snap.fake and "FAKE" in snap.label
    quote = PriceBook().quote("scripted/solver")
    assert quote is not None and quote.fake
    # 1 USD/M input, 4 USD/M output, 1.25 write, 0.1 read (documented in the shipped file)
    u = TokenUsage(input=2_000, output=500, cache_creation=500, cache_read=1_000)
    assert PriceBook().cost_usd("scripted/solver", u) == pytest.approx(
        (500 * 1 + 500 * 4 + 500 * 1.25 + 1_000 * 0.1) / 1e6)


def test_unpriced_model_fails_before_the_run() -> None:
    book = PriceBook()
    with pytest.raises(UnpricedModelError, match="nope/model"):
        book.require(["nope/model", "scripted/solver"])
    book.require(["nope/model"], allow_unpriced=True)
    assert book.cost_usd("nope/model", TokenUsage(input=1)) is None
    gw = Gateway(ModelRegistry(), book, allow_unpriced=False)
    with pytest.raises(UnpricedModelError):
        gw.open_trial("t", "vllm/some-local-model")
    gw.open_trial("t2", "scripted/quitter")


def test_bad_snapshot_names_file_and_field(tmp_path: Path) -> None:
    bad = write(tmp_path, 'date = "2025-01-01"\n[models.x]\ninput = -1\noutput = 1\n')
    with pytest.raises(PricingError, match=r"snap.toml: field models.x.input"):
        PricingSnapshot.load(bad)
    broken = write(tmp_path, "date = ", "broken.toml")
    with pytest.raises(PricingError, match="broken.toml"):
        PricingSnapshot.load(broken)


def test_wildcards_and_later_snapshots_win(tmp_path: Path) -> None:
    a = write(tmp_path, 'date = "2025-01-01"\n[models."local/*"]\ninput = 1\noutput = 1\n',
              "a.toml")
    b = write(tmp_path, 'date = "2025-02-01"\n[models."local/big"]\ninput = 5\noutput = 5\n',
              "b.toml")
    book = PriceBook.load([a, b])
    assert book.quote("local/small").rates.input == 1  # type: ignore[union-attr]
    assert book.quote("local/big").rates.input == 5  # type: ignore[union-attr]

"""Eq. 2 when a price entry has no cache price: the cost is n/a, or — when the explicit
``cache_price_fallback = "input"`` is chosen — billed at the input rate and said so; a USD
budget is charged an upper bound, never zero. Through the formula, the price book, the
vectorised metrics cost, repricing of a stored run, and the real gateway over HTTP."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import date
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from test_gateway import SECRET, Upstream, post, request_body, serve

from agentmeter.gateway import Budget, Gateway, ModelRegistry, UpstreamModel
from agentmeter.gateway.scripted.policy import Policy
from agentmeter.gateway.scripted.server import Exchange, make_app
from agentmeter.metrics import ConfigInfo, UsdRates, billable_cost, frame_from_arrays, resolve_costs
from agentmeter.metrics.frame import STATUS_CODE
from agentmeter.pricing import (
    ModelRates,
    PriceBook,
    PricingError,
    PricingSnapshot,
    cache_fallback_used,
    charge_bound,
    cost,
)
from agentmeter.records import TokenUsage

PLAIN = ModelRates(input=Decimal(2), output=Decimal(8))  # no cache prices
CACHED = TokenUsage(input=1_000, output=10, cache_creation=100, cache_read=300)


def test_formula_na_without_cache_price_and_explicit_fallback() -> None:
    assert cost(PLAIN, CACHED) is None  # not imputed
    # no cache tokens (0 or not reported): the entry prices the call as usual
    assert cost(PLAIN, TokenUsage(input=1_000, output=10, cache_read=0)) == Decimal("0.00208")
    assert cost(PLAIN, TokenUsage(input=1_000, output=10)) == Decimal("0.00208")
    fb = PLAIN.model_copy(update={"cache_price_fallback": "input"})
    # N = 1000 - 100 - 300 = 600: 2·600 + 8·10 + 2·100 + 2·300 = 2080 per 1e6
    assert cost(fb, CACHED) == Decimal("0.00208") and cache_fallback_used(fb, CACHED)
    assert not cache_fallback_used(PLAIN, CACHED)
    # the budget's charge: unpriced cache tokens at max(p_in, p_out) = 8
    # 2·600 + 8·10 + 8·100 + 8·300 = 4480 per 1e6
    assert charge_bound(PLAIN, CACHED) == Decimal("0.00448")
    assert charge_bound(fb, CACHED) == cost(fb, CACHED)  # priced: the cost itself


def test_fallback_is_named_in_snapshot_entry_or_book(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('date = "2026-06-04"\ncache_price_fallback = "input"\n'
                 '[models."a/m"]\ninput = 2\noutput = 8\n'
                 '[models."b/m"]\ninput = 2\noutput = 8\n')
    book = PriceBook.load([f], use_genai_prices=False)
    assert book.cost_usd("a/m", CACHED) == pytest.approx(0.00208)
    plain = PriceBook([PricingSnapshot(date=date(2026, 6, 4), models={"a/m": PLAIN})],
                      use_genai_prices=False)
    assert plain.cost_usd("a/m", CACHED) is None
    assert plain.charge_usd("a/m", CACHED) == pytest.approx(0.00448)
    fb = PriceBook([PricingSnapshot(date=date(2026, 6, 4), models={"a/m": PLAIN})],
                   use_genai_prices=False, cache_price_fallback="input")
    assert fb.cost_usd("a/m", CACHED) == pytest.approx(0.00208)
    bad = tmp_path / "bad.toml"
    bad.write_text('date = "2026-06-04"\n[models."a/m"]\ninput = 2\noutput = 8\n'
                   'cache_price_fallback = "output"\n')
    with pytest.raises(PricingError, match=r"bad.toml: field models.a/m.cache_price_fallback"):
        PricingSnapshot.load(bad)


def test_metrics_cost_na_or_fallback_with_a_note() -> None:
    rates = UsdRates.from_model_rates(PLAIN)
    c = billable_cost(rates, np.array([1000.0, 1000.0]), np.array([10.0, 10.0]),
                      np.array([100.0, np.nan]), np.array([300.0, 0.0]))
    assert math.isnan(c[0]) and c[1] == pytest.approx(2080 / 1e6)  # no cache tokens: priced
    snap = PricingSnapshot(date=date(2026, 6, 4), models={"p/m": PLAIN})
    cfg = [ConfigInfo("c", "cfg", "p/m", "x", "p/m")]
    fr = frame_from_arrays(cfg, ["t"], config=np.zeros(2), task=np.zeros(2),
                           attempt=np.array([0, 1]), status=np.full(2, STATUS_CODE["passed"]),
                           input=np.array([1000.0, 1000.0]), output=np.array([10.0, 10.0]),
                           cache_creation=np.array([100.0, 0.0]),
                           cache_read=np.array([300.0, 0.0]))
    r = resolve_costs(fr, PriceBook([snap], use_genai_prices=False))
    assert math.isnan(r.cost_usd[0]) and r.cost_usd[1] == pytest.approx(2080 / 1e6)
    assert any("cfg" in n and "cost n/a" in n and "cache-creation and cache-read" in n
               for n in r.notes), r.notes
    r = resolve_costs(fr, PriceBook([snap], use_genai_prices=False,
                                    cache_price_fallback="input"))
    assert r.cost_usd[0] == pytest.approx(2080 / 1e6)
    assert any("billed at the input rate (cache_price_fallback = input)" in n for n in r.notes)


# --- the gateway: n/a cost, the budget charged an upper bound --------------------------------

@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    log: list[Exchange] = []
    runner, port = await serve(make_app(Policy("explorer", 3), log=log))
    yield Upstream(runner, port, log)
    await runner.cleanup()


def _gateway(upstream: Upstream, book: PriceBook) -> Gateway:
    models = ModelRegistry({"test/up": UpstreamModel(
        name="test/up", base_url=upstream.base_url, wire_api="messages",
        key_env="AGENTMETER_TEST_KEY", price_key="nocache/m", upstream_model="m")})
    return Gateway(models, book)


async def test_gateway_cost_na_and_budget_charged_a_bound(
        upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    snap = PricingSnapshot(date=date(2026, 6, 4), models={"nocache/m": PLAIN})
    gw = _gateway(upstream, PriceBook([snap], use_genai_prices=False))
    await gw.start(host="127.0.0.1", port=0)
    try:
        token = gw.open_trial("t", "test/up", budget=Budget(max_usd=1000))
        for turn in range(2):
            status, body, _ = await post(gw, "messages", token,
                                         request_body("messages", False, turn))
            assert status == 200, body
        meter = gw.close_trial("t")
    finally:
        await gw.stop()
    a, b = meter.calls
    assert (a.usage.cache_creation or 0) > 0 and (b.usage.cache_read or 0) > 0
    assert a.cost_usd is None and b.cost_usd is None  # n/a, not billed as input
    assert meter.cost_usd is None  # the trial's cost is n/a, never a partial sum
    bound = sum(float(charge_bound(PLAIN, c.usage) or 0) for c in meter.calls)
    assert meter.charged_usd == pytest.approx(bound) and bound > 0  # charged, not free
    # the bound is at least what the input-rate reading would have billed
    fb = PLAIN.model_copy(update={"cache_price_fallback": "input"})
    assert bound >= sum(float(cost(fb, c.usage) or 0) for c in meter.calls)


async def test_gateway_usd_budget_refuses_after_unpriced_cache_tokens(
        upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget between the input-rate cost and the bound: the second call is refused (the
    cache tokens were not free), where billing them as input would have let it through."""
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    snap = PricingSnapshot(date=date(2026, 6, 4), models={"nocache/m": PLAIN})
    gw = _gateway(upstream, PriceBook([snap], use_genai_prices=False))
    await gw.start(host="127.0.0.1", port=0)
    try:
        probe = gw.open_trial("probe", "test/up")
        assert (await post(gw, "messages", probe, request_body("messages", False)))[0] == 200
        first = gw.close_trial("probe").calls[0].usage
        fb = PLAIN.model_copy(update={"cache_price_fallback": "input"})
        as_input, bound = float(cost(fb, first) or 0), float(charge_bound(PLAIN, first) or 0)
        assert as_input < bound
        token = gw.open_trial("t", "test/up", budget=Budget(max_usd=(as_input + bound) / 2))
        assert (await post(gw, "messages", token, request_body("messages", False)))[0] == 200
        # refused as a budget refusal (Messages' shape: 402 billing_error)
        status, body, _ = await post(gw, "messages", token, request_body("messages", False, 1))
        assert status == 402 and b"budget" in body
        assert gw.close_trial("t").budget_exceeded
    finally:
        await gw.stop()

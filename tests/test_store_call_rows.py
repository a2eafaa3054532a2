"""A model call's row as the gateway stores it is the row its record made the old way
(``model_dump``, every string through ``storable``, SQLAlchemy's insert): field by field."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from test_gateway import PATHS, headers_for, request_body

from agentmeter.gateway import Gateway, ModelRegistry
from agentmeter.gateway.metering import StoreSink
from agentmeter.pricing import PriceBook
from agentmeter.records import USAGE_COLUMNS, ModelCallRecord, RunRecord, TokenUsage
from agentmeter.store import schema as s
from agentmeter.store.db import Store


def old_row(run_id: str, try_number: int, call: ModelCallRecord) -> dict[str, Any]:
    """How ``schema.model_call_to_row`` made a row before (kept here as the reference)."""
    row = call.model_dump(mode="python", exclude={"usage"})
    row.update({col: getattr(call.usage, f) for f, col in USAGE_COLUMNS.items()})
    row["run_id"] = run_id
    row["try_number"] = try_number
    return {k: _old_storable(v) if isinstance(v, str) else v for k, v in row.items()}


def _old_storable(text: str) -> str:
    """``schema.storable`` of a string before, by its regular expression alone."""
    unstorable = re.compile("[\x00\ud800-\udfff]")
    return unstorable.sub(s._escape_unstorable, text) if unstorable.search(text) else text


def _records() -> list[ModelCallRecord]:
    when = datetime(2026, 11, 29, 18, 0, 1, 123456, tzinfo=UTC)
    return [
        ModelCallRecord(trial_id="t", seq=0, wire_api="chat", client_api="messages",
                        model="client", upstream_model="up\x00", status_code=200, stream=True,
                        started_at=when, latency_s=0.25, ttft_s=0.125,
                        usage=TokenUsage(input=10, output=3, cache_read=4, reasoning=1),
                        cost_usd=1.5e-05, bytes_in=100, bytes_out=200),
        ModelCallRecord(trial_id="t", seq=1, wire_api="gemini", client_api="gemini",
                        model="m\x00odel é", upstream_model="\udcff-up\ud800",
                        status_code=502, stream=False,
                        started_at=when.astimezone(timezone(timedelta(hours=-5))),
                        latency_s=1.0, error="upstream \x00 failed: \udce9", scripted=True,
                        purpose="judge"),
    ]


@pytest.mark.parametrize("call", _records(), ids=["plain", "unstorable"])
def test_model_call_to_row_is_the_old_row(call: ModelCallRecord) -> None:
    new, old = s.model_call_to_row("r", 2, call), old_row("r", 2, call)
    assert list(new) == list(old)  # the same columns in the same order (the statement's key)
    for name, value in old.items():
        assert type(new[name]) is type(value) and new[name] == value, name


def _raw_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT * FROM model_calls ORDER BY trial_id, seq").fetchall()


async def test_a_call_stored_through_the_gateway_is_the_row_validated_the_old_way(
        tmp_path: Path) -> None:
    """A served call, a refused one (hosted input) and a NUL-bearing model name, stored by
    the gateway's writer; the same records stored by SQLAlchemy's insert of the old rows in a
    second store: the two databases hold the same values, column by column."""
    store = Store.open(tmp_path / "a")
    store.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
    gw = Gateway(ModelRegistry(), PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "scripted/explorer", sink=StoreSink(store, "r", 1))
        async with aiohttp.ClientSession() as session:
            for body in (request_body("chat", False), {**request_body("chat", True),
                                                        "model": "na\x00me"},
                         {**request_body("chat", False), "messages": [{"role": "user",
                          "content": [{"type": "image_url",
                                       "image_url": {"url": "https://x.test/a.png"}}]}]}):
                async with session.post(gw.base_url + PATHS["chat"], json=body,
                                        headers=headers_for("chat", token)) as r:
                    await r.read()
        calls = (await gw.finish_trial("t")).calls
    finally:
        await gw.stop()
    assert len(calls) == 3 and {c.status_code for c in calls} == {200, 400}
    reference = Store.open(tmp_path / "b")
    reference.create_run(RunRecord(id="r", backend="local", attempts=1, concurrency=1))
    with reference._write("reference rows") as conn:
        conn.execute(sa.insert(s.model_calls), [old_row("r", 1, c) for c in calls])
    got, want = _raw_rows(tmp_path / "a" / "agentmeter.db"), \
        _raw_rows(tmp_path / "b" / "agentmeter.db")
    assert len(got) == 3
    for g, w in zip(got, want, strict=True):
        assert list(map(type, g)) == list(map(type, w)) and g == w
    assert store.model_calls("r") == reference.model_calls("r")

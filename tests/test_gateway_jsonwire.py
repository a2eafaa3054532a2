"""JSON on the call path (``gateway/jsonwire.py``): the values ``orjson`` reads and writes are
``json``'s, and what an upstream receives is the client's request (model replaced) to the
last digit and character."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from test_gateway import PATHS, serve

from agentmeter.gateway import Gateway, ModelRegistry, UpstreamModel, jsonwire
from agentmeter.gateway.sse import request_object
from agentmeter.pricing import PriceBook

#: texts both parsers read, and texts where they differ (``jsonwire.loads`` must read them as
#: ``json`` does)
TEXTS = [
    b'{"a":1,"a":2}', b'{"a":-0}', b'{"a":-0.0}', b'{"a":1.0}', b'{"a":1e-7}', b'{"a":0.1}',
    b'{"a":1E300}', b'{"a":18446744073709551615}', b'{"a":9223372036854775807}',
    b'{"a":-9223372036854775808}', b'{"a":"\\u0000\\u2028\\"\\\\/\\ud83d\\ude00"}',
    '{"a":"é ✓ 😀"}'.encode(), b' {"a" : [ 1 , {} ] } ',
    # orjson would read these as floats: the digits kept (a run of 19 digits and more)
    b'{"a":123456789012345678901234567890}', b'{"a":-9223372036854775809}',
    b'{"a":18446744073709551616}', b'{"a":0.12345678901234567890123}',
    # orjson refuses these; json reads them
    b'{"a":1E400}', b'{"a":NaN}', b'{"a":-Infinity}', b'{"a":"\\ud800"}', b'\xef\xbb\xbf{}',
    '{"a":"x"}'.encode("utf-16"),
]
#: texts neither reads
BAD = [b'{"a":1,}', b"{'a':1}", b'{"a":"\x01"}', b'{"a":01}', b"\xff{}", b"", b"[" * 100_000]


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types (1 is not 1.0) and NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _outcome(parse: Any, text: str | bytes) -> Any:
    try:
        return parse(text)
    except (ValueError, RecursionError) as e:
        return type(e)


@pytest.mark.parametrize("text", TEXTS)
def test_loads_reads_what_json_reads(text: bytes) -> None:
    assert _same(jsonwire.loads(text), json.loads(text))
    as_text = text.decode("utf-8", "replace")  # SSE events' data is text
    assert _same(_outcome(jsonwire.loads, as_text), _outcome(json.loads, as_text))


@pytest.mark.parametrize("text", BAD)
def test_loads_refuses_what_json_refuses(text: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        json.loads(text)
    with pytest.raises((ValueError, RecursionError)):
        jsonwire.loads(text)


def test_an_integer_beyond_64_bits_keeps_its_digits() -> None:
    """orjson reads 123456789012345678901234567890 as 1.2345678901234568e+29: a client's tool
    argument (an id, a seed) would reach the provider changed."""
    big = 123456789012345678901234567890
    assert jsonwire.loads(b'{"a":%d}' % big) == {"a": big}
    assert request_object(b'{"a":%d}' % -big) == {"a": -big}
    assert json.loads(jsonwire.dumps({"a": big, "b": -big})) == {"a": big, "b": -big}


@pytest.mark.parametrize("text", [b'{"a":NaN}', b'{"a":[Infinity]}', b'{"a":-Infinity}',
                                  b'{"a":1E400}', b'{"a":-1e999}'])
def test_a_request_with_a_non_finite_number_is_refused(text: bytes) -> None:
    """No provider takes NaN or Infinity (not JSON), and orjson would send them as null."""
    assert request_object(text) == "malformed JSON: the body must be a JSON object"


def test_dumps_writes_what_json_reads_back() -> None:
    obj = {"s": "é\u2028\x00\x1f\"\\/😀", "f": [0.1, 1e-7, 1e300, -0.0, 1.0, 5e-324],
           "i": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**64) - 1],
           "n": None, "b": [True, False], "lone": "\ud800", "deep": [[[[{}]]]]}
    out = jsonwire.dumps(obj)
    assert _same(json.loads(out), obj)
    plain = {k: v for k, v in obj.items() if k not in ("i", "lone")}
    # compact UTF-8, the same bytes as json's but for how an exponent is spelled
    assert _exponents(jsonwire.dumps(plain)) == _exponents(
        json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode())


def _exponents(text: bytes) -> bytes:
    """``text`` with each float's exponent in one spelling (``1e-07``, ``1e-7``; ``1e+300``,
    ``1e300``: json writes the first of each, orjson either, by version)."""
    return re.sub(rb"([0-9])[eE]\+?(-?)0*([0-9])", rb"\1e\2\3", text)


async def test_the_upstream_receives_the_clients_request_exactly() -> None:
    """Unicode, escapes, floats and integers of every size reach the upstream as the client
    sent them: compact UTF-8 of the same values (the model replaced by the upstream's)."""
    got: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.json_response({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok ✓"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}})

    app = web.Application()
    app.router.add_post(PATHS["chat"], handle)
    runner, port = await serve(app)
    gw = Gateway(ModelRegistry({"cap/up": UpstreamModel(
        name="cap/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        upstream_model="upstream-id", price_key="scripted/x")}), PriceBook())
    await gw.start(port=0)
    big = 123456789012345678901234567890
    sent = ('{"model":"client-name","messages":[{"role":"user","content":'
            '"\\u00e9 é \\ud83d\\ude00 \\u2028 \\"q\\" \\\\ \\/ \\t"}],'
            '"temperature":0.1,"top_p":1.0,"seed":' + str(big) + ',"metadata":{"x":1e-7,'
            '"y":-0.0,"z":18446744073709551615,"w":1E300}}').encode()
    expected = json.loads(sent)
    expected["model"] = "upstream-id"
    plain = json.loads(sent)
    plain["model"] = "upstream-id"
    del plain["seed"]
    try:
        token = gw.open_trial("t", "cap/up")
        async with aiohttp.ClientSession() as s:
            for body, want in ((sent, expected),
                               (sent.replace(b',"seed":%d' % big, b""), plain)):
                async with s.post(gw.base_url + PATHS["chat"], data=body, headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json"}) as r:
                    assert r.status == 200
                    assert (await r.json())["choices"][0]["message"]["content"] == "ok ✓"
                assert _same(json.loads(got[-1]), want)
        # without an integer beyond 64 bits: orjson's bytes, the same as json's compact UTF-8
        assert _exponents(got[-1]) == _exponents(
            json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode())
        assert b"\xc3\xa9" in got[-1] and b"\\u00e9" not in got[-1]
    finally:
        await gw.stop()
        await runner.cleanup()

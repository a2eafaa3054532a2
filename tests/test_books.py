"""The books close exactly with slow models: a call that outlives its trial or its run is still
counted on it (issue 31). Fake upstreams with delays of a few seconds, short settle times."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from polling import eventually_async
from taskgen import make_task
from test_gateway import APIS, PATHS, headers_for, request_body

from agentmeter.gateway import Gateway, ModelRegistry, UpstreamModel
from agentmeter.gateway import server as gw_server
from agentmeter.pricing import PriceBook
from agentmeter.records import TokenUsage, TrialRecord
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store import leases
from agentmeter.store.db import Store

USAGE = {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125}


class SlowUpstream:
    """A chat upstream whose every reply takes ``delay`` seconds (a slow local model);
    ``started`` and ``finished`` count the requests it took and answered."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = 0
        self.finished = 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.started += 1
        await asyncio.sleep(self.delay)
        self.finished += 1
        return web.json_response({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "done"}}],
            "usage": USAGE})


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """A fake upstream that, like a real server, stops a handler whose client hung up."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def serve_chat(handler: Any) -> tuple[web.AppRunner, int]:
    """``serve`` with ``handler`` as the upstream's Chat Completions route."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return await serve(app)


def gateway_to(port: int, name: str, **fields: Any) -> Gateway:
    """A gateway whose one model ``name`` is the chat upstream on ``port``."""
    return Gateway(ModelRegistry({name: UpstreamModel(
        name=name, base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat", **fields)}),
        PriceBook())


def sums(store: Store, run_id: str) -> tuple[int, int, int]:
    """(calls, input, output) of the run's tries, and the same of its stored calls, must agree."""
    trials = store.trials(run_id)
    return (sum(t.model_calls for t in trials), sum(t.usage.input or 0 for t in trials),
            sum(t.usage.output or 0 for t in trials))


def call_sums(store: Store, run_id: str) -> tuple[int, int, int]:
    calls = [c for c in store.model_calls(run_id) if c.purpose == "agent"]
    return (len(calls), sum(c.usage.input or 0 for c in calls),
            sum(c.usage.output or 0 for c in calls))


async def _slow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drain_s: float,
                    delay: float) -> tuple[Store, str, TrialRecord]:
    up = SlowUpstream(delay)
    runner, port = await serve_chat(up.handle)
    models = tmp_path / "models.toml"
    models.write_text(f'[models."slow/m"]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                      'wire_api = "chat"\nprice_key = "scripted/x"\n')
    # the trial waits 0.2 s for its call (not 60 s); the run's end waits ``drain_s``
    monkeypatch.setattr(gw_server, "SETTLE_S", 0.2)
    monkeypatch.setattr(gw_server, "DRAIN_S", drain_s)
    make_task(tmp_path / "suite", "slow", agent_timeout=1.0)
    store = Store.open(tmp_path / "runs")
    try:
        rid, _ = await run(store, prepare(RunRequest(
            suites=[str(tmp_path / "suite")], agents=["native"], models=["slow/m"],
            models_file=str(models))))
    finally:
        await runner.cleanup()
    assert up.started == 1
    (trial,) = store.trials(rid)
    return store, rid, trial


@pytest.mark.slow
async def test_a_call_that_outlives_its_trial_is_totalled_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent times out at 1 s, the trial waits 0.2 s, the call ends at 3 s (before the run
    ends): the trial's totals are its call's, never a known zero."""
    store, rid, trial = await _slow_run(tmp_path, monkeypatch, drain_s=10.0, delay=3.0)
    assert trial.extra[leases.IN_FLIGHT] == [0]
    assert leases.NA not in trial.extra, trial.extra
    assert (trial.model_calls, trial.usage.input, trial.usage.output) == (1, 120, 5)
    assert trial.cost_usd is not None and trial.cost_usd > 0
    (call,) = store.model_calls(rid)
    assert call.status_code == 200
    assert sums(store, rid) == call_sums(store, rid) == (1, 120, 5)


@pytest.mark.slow
async def test_a_call_cancelled_at_run_end_is_stored_and_its_trial_is_na(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run ends (as on Ctrl-C: no wait) while the call runs: the call is stored with its
    fate, the trial counts it and its totals are n/a with the reason, never 0."""
    store, rid, trial = await _slow_run(tmp_path, monkeypatch, drain_s=0.0, delay=60.0)
    (call,) = store.model_calls(rid)
    assert call.error is not None and leases.HARNESS_CANCELLED in call.error, call.error
    assert trial.model_calls == 1
    assert trial.usage == TokenUsage() and trial.cost_usd is None
    assert "cancelled at the end of the run" in trial.extra[leases.NA]
    assert sums(store, rid) == call_sums(store, rid) == (1, 0, 0)


def test_books_wait_for_every_started_call() -> None:
    """The store's rule: n/a (with the reason) while a started call is not stored."""
    from agentmeter.records import ModelCallRecord

    def call(seq: int, purpose: str = "agent") -> ModelCallRecord:
        return ModelCallRecord.model_validate({
            "trial_id": "t", "seq": seq, "wire_api": "chat", "client_api": "chat", "model": "m",
            "upstream_model": "m", "stream": False, "started_at": "2026-01-01T00:00:00Z",
            "latency_s": 1.0, "status_code": 200,
            "usage": {"input": 10, "output": 2}, "cost_usd": 0.5, "purpose": purpose})

    totals, reason = leases.book_totals([call(0)], [1])
    assert totals["usage"] == TokenUsage() and totals["cost_usd"] is None
    assert totals["model_calls"] == 2 and reason is not None and "seq 1" in reason
    totals, reason = leases.book_totals([call(0), call(1), call(2, "judge")], [1])
    assert reason is None and totals["model_calls"] == 2  # a judge's call is evaluation cost
    assert totals["usage"] == TokenUsage(input=20, output=4) and totals["cost_usd"] == 1.0


# --- streams keep clients alive ------------------------------------------------------------

def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(obj)}\n\n".encode()


class FaultyUpstream:
    """A streaming chat upstream: headers and a keep-alive comment at once, the first token
    after ``first_token_s``; ``done``: whether it ends with ``[DONE]``. ``token_at``: its own
    clock reading (``time.perf_counter()``) as it sends its first token."""

    def __init__(self, first_token_s: float = 0.0, done: bool = True) -> None:
        self.first_token_s, self.done = first_token_s, done
        self.served = 0
        self.token_at: float | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.served += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b": upstream is processing\n\n")
        await asyncio.sleep(self.first_token_s)
        self.token_at = time.perf_counter()
        await resp.write(_chunk({"role": "assistant", "content": "HELLO"}))
        await resp.write(_chunk({}, "stop"))
        usage = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}
        await resp.write(f'data: {json.dumps({"id": "c", "choices": [], "usage": usage})}\n\n'
                         .encode())
        if self.done:
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@pytest.fixture
async def faulty(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Gateway, FaultyUpstream]]:
    up = FaultyUpstream()
    runner, port = await serve_chat(up.handle)
    gw = gateway_to(port, "fake/m", price_key="scripted/x")
    gw.keepalive_s = 0.1
    await gw.start(port=0)
    yield gw, up
    await gw.stop(drain_s=0)
    await runner.cleanup()


async def _timed_read(gw: Gateway, api: str, token: str) -> list[tuple[float, bytes]]:
    """The client's view of one streamed call: (``time.perf_counter()``, bytes) per read."""
    out: list[tuple[float, bytes]] = []
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + PATHS[api], json=request_body(api, True),
            headers=headers_for(api, token)) as r:
        assert r.status == 200
        async for data in r.content.iter_any():
            out.append((time.perf_counter(), data))
    return out


@pytest.mark.parametrize("api", APIS)
async def test_a_slow_first_token_gets_start_events_and_keepalives_at_once(
        faulty: tuple[Gateway, FaultyUpstream], api: str) -> None:
    """The upstream's first token comes after 1 s: the client has its start event and
    keep-alives before it. "Before" is causal (the upstream's own clock reading as it sends the
    token), not a fixed window a loaded machine can miss."""
    gw, up = faulty
    up.first_token_s = 1.0
    token = gw.open_trial("trial-SECRET-NAME", "fake/m")
    reads = await _timed_read(gw, api, token)
    assert up.token_at is not None
    early = b"".join(d for t, d in reads if t < up.token_at)  # before the first token
    first = {"messages": b"event: message_start", "responses": b"event: response.created",
             "chat": b": upstream is processing"}[api]  # chat: passed through as it is
    assert early.startswith(first), early[:200]
    keepalive = {"messages": b"event: ping", "responses": b"event: response.in_progress",
                 "chat": b": keep-alive"}[api]
    assert early.count(keepalive) >= 3, early  # every 0.1 s while the upstream is quiet
    whole = b"".join(d for _, d in reads)
    assert b"HELLO" in whole and b"HELLO" not in early
    assert b"trial-SECRET-NAME" not in whole  # the trial's id names the task: not in ids
    meter = gw.close_trial("trial-SECRET-NAME")
    (call,) = meter.calls
    assert call.ttft_s is not None and call.ttft_s >= 0.95  # keep-alives are not a first token
    assert (call.usage.input, call.usage.output) == (50, 7) and call.error is None


async def test_a_stream_with_a_finish_reason_and_no_done_is_whole(
        faulty: tuple[Gateway, FaultyUpstream]) -> None:
    """Some servers end a stream after the finish reason and usage, without ``[DONE]``: the
    call is served, not a provider fault (which made the trial infra_invalid, run 3 times)."""
    gw, up = faulty
    up.done = False
    token = gw.open_trial("t", "fake/m")
    for api in APIS:
        await _timed_read(gw, api, token)
    meter = gw.close_trial("t")
    assert meter.infra_error is None, meter.infra_error
    assert [(c.error, c.usage.output) for c in meter.calls] == [(None, 7)] * 3


# --- an upstream slow to send even its headers ----------------------------------------------

#: the Google GenAI SDK's SSE reader (Gemini CLI 0.61.0's bundle): events are taken with this
#: regex anchored at the start of its buffer; anything else there stalls every later event
GENAI_EVENT = re.compile(r"^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)")
SLOW_PATHS = {**PATHS, "gemini": "/v1beta/models/fake-m:streamGenerateContent?alt=sse"}
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "Fix the bug in app.py"}]}]}


def genai_events(stream: bytes) -> list[str]:
    """The events the GenAI SDK reads from ``stream`` (asserting nothing is left unread)."""
    buffer, out = stream.decode(), []
    while (m := GENAI_EVENT.match(buffer)) is not None:
        out.append(m.group(1))
        buffer = buffer[m.end():]
    assert not buffer.strip(), buffer[:200]  # the SDK: "Incomplete JSON segment at the end"
    return out


@pytest.fixture
async def slow_headers() -> AsyncIterator[tuple[Gateway, list[float]]]:
    """The scripted chat model behind a server that sends nothing, headers included, for
    ``knobs[0]`` seconds (then answers ``knobs[1]``; 200: the scripted reply); the moment it
    stops holding (``time.perf_counter()``) is appended to ``knobs``."""
    from agentmeter.gateway.scripted.policy import Policy
    from agentmeter.gateway.scripted.server import make_app

    knobs = [1.0, 200.0]

    @web.middleware
    async def hold(request: web.Request, handler: Any) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(knobs[0])
        knobs.append(time.perf_counter())
        if knobs[1] != 200:
            return web.json_response({"error": {"message": "too long", "type": "x"}},
                                     status=int(knobs[1]))
        return await handler(request)  # type: ignore[no-any-return]

    app = make_app(Policy("quitter"), apis=("chat",))
    app.middlewares.append(hold)
    runner, port = await serve(app)
    gw = gateway_to(port, "fake-m", price_key="scripted/x")
    gw.keepalive_s = 0.1
    await gw.start(port=0)
    yield gw, knobs
    await gw.stop(drain_s=0)
    await runner.cleanup()


async def _slow_read(gw: Gateway, api: str, token: str) -> list[tuple[float, bytes]]:
    """Each read's ``time.perf_counter()`` and bytes; the first, empty, is the headers'."""
    out: list[tuple[float, bytes]] = []
    body = GEMINI_BODY if api == "gemini" else request_body(api, True)
    headers = {"x-goog-api-key": token} if api == "gemini" else headers_for(api, token)
    async with aiohttp.ClientSession() as s, s.post(gw.base_url + SLOW_PATHS[api], json=body,
                                                    headers=headers) as r:
        out.append((time.perf_counter(), b""))  # the status line and headers
        assert r.status == 200
        async for data in r.content.iter_any():
            out.append((time.perf_counter(), data))
    return out


@pytest.mark.parametrize("api", [*APIS, "gemini"])
async def test_slow_upstream_headers_get_the_client_its_stream_at_once(
        slow_headers: tuple[Gateway, list[float]], api: str) -> None:
    """The upstream sends its headers after 1 s: the client has its headers, start events and
    keep-alives (its API's own) before the upstream answers, then the whole answer; one call
    metered. "Before" is causal (the upstream's own clock reading as it answers), so a loaded
    machine cannot make it flaky."""
    gw, knobs = slow_headers
    token = gw.open_trial("t", "fake-m")
    reads = await _slow_read(gw, api, token)
    released = knobs[2]  # when the upstream stopped holding its answer
    assert reads[0][0] < released  # headers at once (not after the upstream's)
    early = b"".join(d for t, d in reads if t < released)
    start = {"messages": b"event: message_start", "responses": b"event: response.created",
             "chat": b": keep-alive", "gemini": b"\r\n"}[api]
    assert early.startswith(start), early[:200]
    keepalive = {"messages": b"event: ping", "responses": b"event: response.in_progress",
                 "chat": b": keep-alive", "gemini": b"\r\n"}[api]
    assert early.count(keepalive) >= 3, early
    whole = b"".join(d for _, d in reads)
    if api == "gemini":
        assert not early.strip()  # only whitespace before the first event: the SDK reads on
        events = [json.loads(e) for e in genai_events(whole)]
        assert events and "candidates" in events[0]
        assert events[-1]["usageMetadata"]["candidatesTokenCount"] > 0
    else:
        assert whole.count(keepalive) >= 3 and len(whole) > len(early) + 100
    meter = gw.close_trial("t")
    (call,) = meter.calls
    assert call.status_code == 200 and call.error is None and call.usage.output
    assert call.ttft_s is not None and call.ttft_s >= 0.55  # keep-alives are no first token


@pytest.mark.parametrize("api", [*APIS, "gemini"])
async def test_a_slow_refusal_reaches_an_open_stream_in_its_api_form(
        slow_headers: tuple[Gateway, list[float]], api: str) -> None:
    gw, knobs = slow_headers
    knobs[:] = [0.3, 400]
    token = gw.open_trial("t", "fake-m")
    whole = b"".join(d for _, d in await _slow_read(gw, api, token))
    tail = whole.strip().rsplit(b"\n", 1)[-1]
    if api == "messages":
        assert b"event: error" in whole and b'"invalid_request_error"' in whole
    elif api == "responses":
        assert b"event: response.failed" in whole and b'"status":"failed"' in whole
    elif api == "chat":
        assert json.loads(tail.removeprefix(b"data: "))["error"]["message"] == "too long"
    else:  # the GenAI SDK raises a chunk that is an error object as an ApiError with its code
        assert json.loads(tail)["error"]["code"] == 400
    assert b"too long" in whole
    meter = gw.close_trial("t")
    (call,) = meter.calls
    assert call.status_code == 400 and call.error == "upstream 400"
    assert call.bytes_out == len(whole)


# --- abandoned generations stop costing (local providers) ----------------------------------

class GeneratingServer:
    """A single-slot local server: streams a token every 20 ms for 10 s (or answers whole after
    10 s) unless its client goes away; records when it stopped and how many it generated."""

    def __init__(self) -> None:
        self.generated = 0
        self.stopped_at: float | None = None
        self.finished = False
        self.received = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received = True
        try:
            if not body.get("stream"):
                await asyncio.sleep(10)
                self.finished = True
                return web.json_response({"choices": []})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for _ in range(500):
                self.generated += 1
                await resp.write(_chunk({"content": "tok "}))
                await asyncio.sleep(0.02)
            self.finished = True
            await resp.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
            return resp
        except (asyncio.CancelledError, ConnectionError):
            self.stopped_at = time.perf_counter()
            raise


@pytest.mark.parametrize("stream", [True, False])
async def test_a_local_provider_stops_generating_when_its_client_hangs_up(stream: bool) -> None:
    server = GeneratingServer()
    runner, port = await serve_chat(server.handle)
    gw = gateway_to(port, "llamacpp/m", local=True)
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "llamacpp/m")
        async with aiohttp.ClientSession() as s:
            post = asyncio.ensure_future(s.post(gw.base_url + PATHS["messages"],
                                                json=request_body("messages", stream),
                                                headers=headers_for("messages", token)))
            if stream:
                r = await post
                seen = b""
                while b"tok" not in seen:
                    seen += await asyncio.wait_for(r.content.readany(), 5)
                r.close()  # the client hangs up mid-stream
            else:  # once the request is at the server (not a fixed wait a slow loop can miss)
                assert await eventually_async(lambda: server.received, timeout=30, interval=0.01)
                post.cancel()  # the client hangs up waiting for the whole answer
                with contextlib.suppress(asyncio.CancelledError):
                    await post
        hung_up = time.perf_counter()
        meter = await gw.finish_trial("t", settle_s=5)
        assert await eventually_async(lambda: server.stopped_at is not None, timeout=3)
        assert server.stopped_at is not None and server.stopped_at - hung_up < 1.0
        assert not server.finished and server.generated < 100
        (call,) = meter.calls
        assert call.error is not None and "local provider" in call.error, call.error
        assert meter.infra_error is None  # the client's doing, not the provider's
    finally:
        await gw.stop(drain_s=0)
        await runner.cleanup()


async def test_a_paid_provider_call_whose_client_hung_up_unstreamed_is_read_and_metered() -> None:
    """Not local: the client's hang-up does not cancel the upstream request; the answer is read
    to its end and metered (the provider bills it), the record says the client was gone."""
    up = SlowUpstream(0.5)
    runner, port = await serve_chat(up.handle)
    gw = gateway_to(port, "paid/m", price_key="scripted/x")
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "paid/m")
        async with aiohttp.ClientSession() as s:
            post = asyncio.ensure_future(s.post(gw.base_url + PATHS["chat"],
                                                json=request_body("chat", False),
                                                headers=headers_for("chat", token)))
            # once the upstream has the request, well before its answer (0.5 s)
            assert await eventually_async(lambda: up.started == 1, timeout=30, interval=0.01)
            post.cancel()  # the client hangs up waiting for the whole answer
            with contextlib.suppress(asyncio.CancelledError):
                await post
        meter = await gw.finish_trial("t", settle_s=5)
        assert up.finished == 1
        (call,) = meter.calls
        assert call.status_code == 200 and (call.usage.input, call.usage.output) == (120, 5)
        assert call.cost_usd is not None and call.cost_usd > 0
        assert call.error is not None and call.error.startswith("client disconnected")
    finally:
        await gw.stop(drain_s=0)
        await runner.cleanup()


# --- smaller faults ------------------------------------------------------------------------

async def _empty(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    usage = {"prompt_tokens": 9, "completion_tokens": 0, "total_tokens": 9}
    if not body.get("stream"):
        return web.json_response({"id": "c", "object": "chat.completion", "choices": [],
                                  "usage": usage})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(f'data: {json.dumps({"id": "c", "choices": [], "usage": usage})}\n\n'
                     .encode() + b"data: [DONE]\n\n")
    return resp


@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_with_empty_choices_is_a_provider_fault(stream: bool) -> None:
    runner, port = await serve_chat(_empty)
    gw = gateway_to(port, "fake/m", price_key="scripted/x")
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "fake/m")
        for api in APIS:
            async with aiohttp.ClientSession() as s, s.post(
                    gw.base_url + PATHS[api], json=request_body(api, stream),
                    headers=headers_for(api, token)) as r:
                await r.read()
                assert r.status == (200 if stream else 502)  # a stream's status is sent first
        meter = gw.close_trial("t")
        assert meter.infra_error is not None and "no choices" in meter.infra_error
        assert all(c.usage.input == 9 for c in meter.calls)  # what it did report is metered
    finally:
        await gw.stop(drain_s=0)
        await runner.cleanup()


def test_native_sends_a_malformed_tool_call_back_as_the_model_wrote_it() -> None:
    from agentmeter.agents.native.model_client import _chat_message, parse_reply

    reply = parse_reply("chat", {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "bash", "arguments": '{"command": "ls'}}]}}]})
    (call,) = reply.message.tool_calls
    assert call.parse_error is not None
    sent = _chat_message(reply.message)
    assert sent["tool_calls"][0]["function"]["arguments"] == '{"command": "ls'  # not "{}"

"""One model call through the gateway: check, forward (translating if needed), stream, meter.

A call is finished (metered, charged to its trial's budget, handed to the trial's sink) before
the client sees the end of its response. A client that hangs up mid-stream does not end the call:
the upstream is read to its end, so the call's real usage is metered and charged. Before it is
served a call reserves its worst case against the budgets (``worst_case``); its true usage
replaces the reservation when it finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from agentmeter.gateway import translate
from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.errors import (
    convert_error,
    error_body,
    error_bytes,
    error_message,
    gemini_budget_bytes,
)
from agentmeter.gateway.metering import (
    REQUEST_REFUSED,
    Reservation,
    StreamUsage,
    TrialState,
    body_usage,
)
from agentmeter.gateway.neutral import NeutralUsage, completion_events
from agentmeter.gateway.persist import CallWriter
from agentmeter.gateway.sse import SseEvent, SseParser, encode, loads_object
from agentmeter.gateway.upstream import Upstream, UpstreamReply, UpstreamRequest
from agentmeter.gateway.wire_gemini import Framing
from agentmeter.gateway.wire_messages import MessagesStreamWriter
from agentmeter.gateway.wire_responses import ResponsesStreamWriter
from agentmeter.records import ModelCallRecord, TokenUsage, WireApi, utcnow

if TYPE_CHECKING:
    from agentmeter.pricing import PriceBook

JSON = "application/json"
#: the error of a call the gateway cancelled because the run ended while it was under way (its
#: fate; the others: completed, or cut by the upstream: ``upstream stream broke: ...``)
CANCELLED_BY_HARNESS = "cancelled by the harness: the run ended while the call was under way"
#: the output a call reserves against a token or USD budget when its request sets no cap
DEFAULT_OUTPUT_RESERVE = 32_768


@dataclass
class CallEnv:
    """What a call needs from the gateway."""

    prices: PriceBook
    upstream: Upstream
    secret: str | None  # the injected key: scrubbed from anything sent to the client
    bodies_dir: Path | None
    writer: CallWriter
    write_timeout_s: float = 60.0  # a stream's write the client does not take: it is gone
    keepalive_s: float = 15.0  # a stream quiet this long gets a keep-alive (``keepalive``)


@dataclass
class Call:
    trial: TrialState
    client_api: WireApi
    upstream_api: WireApi
    body: dict[str, Any]
    bytes_in: int
    t0: float = field(default_factory=time.perf_counter)
    started_at: Any = field(default_factory=utcnow)
    seq: int = -1
    status: int = 0
    bytes_out: int = 0
    ttft: float | None = None
    usage: NeutralUsage | None = None
    error: str | None = None
    out_log: list[bytes] | None = None
    upstream_bytes: int = 0  # body bytes the upstream sent (a bound of unreported output)
    client_gone: bool = False
    finished: bool = False
    stream_route: bool | None = None  # Gemini: streaming is the URL's method, not a body field
    sse: bool = True  # Gemini: a stream as SSE (``?alt=sse``), else as one JSON array
    reservation: Reservation | None = None  # held against the budgets until the call settles
    charge_reserved: bool = False  # no answer, the upstream may have generated: charged it

    @property
    def translated(self) -> bool:
        return self.client_api != self.upstream_api

    @property
    def stream(self) -> bool:
        if self.stream_route is not None:
            return self.stream_route
        return self.body.get("stream") is True


def _scrub(data: bytes, secret: str | None) -> bytes:
    if secret and secret.encode() in data:
        return data.replace(secret.encode(), b"***")
    return data


def upstream_body(call: Call) -> tuple[dict[str, Any], bool]:
    """The body sent upstream and whether we added ``include_usage`` the client did not ask for
    (raises ``translate.UnsupportedRequest``)."""
    sent, injected = translate.request_body(call.client_api, call.upstream_api, call.body,
                                            call.stream, call.trial.model.model_id)
    budget = call.trial.budget
    if budget.max_tokens is not None or budget.max_usd is not None:  # the reservation holds
        sent = translate.with_output_cap(call.upstream_api, sent, output_reserve(call),
                                         call.trial.model.base_url)
    return sent, injected


def output_reserve(call: Call) -> int:
    """The output one answer of the call may have: the request's cap, else the model's
    ``max_output_tokens``, else ``DEFAULT_OUTPUT_RESERVE`` (then sent upstream as the call's cap
    when a token or USD budget holds: ``upstream_body``)."""
    return translate.output_cap(call.client_api, call.body) or \
        call.trial.model.max_output_tokens or DEFAULT_OUTPUT_RESERVE


def usage_bound(call: Call, usage: TokenUsage) -> TokenUsage:
    """What the budget is charged for a served call whose usage is (partly) unknown: each
    unreported count replaced by an upper bound. Input: the request's size in bytes (a token is
    at least one byte of its text). Output: the request's output cap when it set one, else the
    bytes the upstream sent (which bounds visible output, not hidden reasoning)."""
    cap = translate.output_cap(call.client_api, call.body)
    return usage.model_copy(update={
        "input": usage.input if usage.input is not None else call.bytes_in,
        "output": usage.output if usage.output is not None else (
            cap if cap is not None else call.upstream_bytes)})


def worst_case(call: Call, prices: PriceBook) -> Reservation:
    """What a call may cost at most: input, the request's bytes (a token is at least a byte of
    its text); output, ``output_reserve`` for each answer it asks for (chat ``n``, Gemini
    ``candidateCount``); in USD, all of it at the highest rate of the model's price entry."""
    tokens = call.bytes_in + output_reserve(call) * translate.choices(call.client_api, call.body)
    usd = prices.max_charge_usd(call.trial.model.price_key, tokens, call.bytes_in) \
        if call.trial.priced and call.trial.budget.max_usd is not None else None
    return Reservation(tokens=tokens, usd=usd or 0.0)


def settle(call: Call) -> None:
    """Give back the call's reservation (once): after it was charged, or when never served."""
    held, call.reservation = call.reservation, None
    if held is not None:
        call.trial.release(held)


async def finish_call(call: Call, env: CallEnv) -> ModelCallRecord:
    """Meter the call, charge its trial and hand it to the trial's sink (once)."""
    call.finished = True
    usage = usage_fields.to_record(call.usage) if call.usage else usage_fields.to_record(
        NeutralUsage())
    model = call.trial.model
    unknown = call.status == 200 and (usage.input is None or usage.output is None)
    record = ModelCallRecord(
        trial_id=call.trial.trial_id, seq=call.seq, wire_api=call.upstream_api,
        client_api=call.client_api, model=str(call.body.get("model") or ""),
        upstream_model=model.model_id if not model.scripted else model.name,
        status_code=call.status, stream=call.stream, started_at=call.started_at,
        latency_s=time.perf_counter() - call.t0, ttft_s=call.ttft, usage=usage,
        cost_usd=env.prices.cost_usd(model.price_key, usage) if call.usage and not unknown
        else None,
        bytes_in=call.bytes_in, bytes_out=call.bytes_out, error=call.error,
        scripted=model.scripted, purpose=call.trial.purpose,
    )
    if unknown:
        bound = usage_bound(call, usage)
        call.trial.add(record, bound, env.prices.charge_usd(model.price_key, bound))
    elif call.charge_reserved and call.reservation is not None:  # what it may have cost
        held = call.reservation.tokens
        call.trial.add(record, TokenUsage(input=call.bytes_in, output=held - call.bytes_in),
                       env.prices.max_charge_usd(model.price_key, held, call.bytes_in))
    else:  # a cost n/a for want of a cache price is charged an upper bound, never zero
        call.trial.add(record, None, env.prices.charge_usd(model.price_key, usage)
                       if call.usage and record.cost_usd is None else None)
    settle(call)  # the true charge replaces the worst case
    await env.writer.write(call.trial, record)
    return record


def _write_bodies(call: Call, env: CallEnv, sent: dict[str, Any] | None) -> None:
    if env.bodies_dir is None:
        return
    import json

    d = env.bodies_dir / call.trial.trial_id
    d.mkdir(parents=True, exist_ok=True)
    stem = f"{call.seq:05d}"
    (d / f"{stem}-request.json").write_text(json.dumps(call.body, indent=1))
    if sent is not None and call.translated:
        (d / f"{stem}-upstream-request.json").write_text(json.dumps(sent, indent=1))
    ext = "sse" if call.stream and call.status == 200 else "json"
    (d / f"{stem}-response.{ext}").write_bytes(b"".join(call.out_log or []))


async def refuse_budget(call: Call, env: CallEnv, reason: str) -> web.Response:
    call.trial.budget_exceeded = True
    call.seq = call.trial.take_seq()
    if call.client_api == "messages":
        call.status, body = 402, error_bytes("messages", 402, f"agentmeter budget: {reason}")
    elif call.client_api == "gemini":
        call.status, body = 429, gemini_budget_bytes(f"agentmeter budget: {reason}")
    else:
        call.status = 429
        body = error_bytes(call.client_api, 429, f"agentmeter budget: {reason}",
                           code="insufficient_quota", kind="insufficient_quota")
    call.error = "budget_exceeded"
    call.bytes_out = len(body)
    await finish_call(call, env)
    return web.Response(status=call.status, body=body, content_type=JSON)


async def refuse_request(call: Call, env: CallEnv, message: str, reason: str) -> web.Response:
    """A request the gateway will not serve (``hosted``): a 400 the agent sees, recorded as a
    refusal (never sent upstream, charged nothing, not counted against ``max_calls``)."""
    call.seq = call.trial.take_seq()
    call.status, body = 400, error_bytes(call.client_api, 400, message)
    call.error = f"{REQUEST_REFUSED}: {reason}"
    call.bytes_out = len(body)
    await finish_call(call, env)
    return web.Response(status=call.status, body=body, content_type=JSON)


async def forward(request: web.Request, call: Call, env: CallEnv) -> web.StreamResponse:
    try:
        sent, injected = upstream_body(call)
    except translate.UnsupportedRequest as e:  # refused before it is a call: not metered
        return web.Response(status=400, body=error_bytes(call.client_api, 400, str(e)),
                            content_type=JSON)
    restream = whole_then_stream(call)
    if restream:
        sent = {k: v for k, v in sent.items() if k != "stream_options"}
        sent["stream"] = False
    call.seq = call.trial.take_seq()
    call.trial.running.add(call.seq)  # started: its trial's totals wait for it (n/a until then)
    if env.bodies_dir is not None:
        call.out_log = []
    headers = {k.lower(): v for k, v in request.headers.items()}
    req = UpstreamRequest(call.upstream_api, sent, call.stream and not restream, headers,
                          cache_key=call.trial.trial_id,
                          solution_script=call.trial.scripted.solution_script)
    client = ClientStream(request, call, env) if call.stream else None
    try:
        got = await _send(request, call, env, req, client)
        if got is None:  # a local provider's client hung up: nobody to answer
            await finish_call(call, env)
            return client.resp if client is not None and client.opened else \
                web.Response(status=499)
        reply = got
    except asyncio.CancelledError:
        _cancelled(call)
        await finish_call(call, env)
        raise
    except Exception as e:  # a bug or an unexpected upstream failure must not crash the gateway
        reply = UpstreamReply(502, JSON, body=error_bytes(call.upstream_api, 502,
                                                          f"upstream failure: {type(e).__name__}"),
                              infra_error=f"upstream failure: {type(e).__name__}: {e}")
    if reply.infra_error:
        call.trial.infra_error = reply.infra_error
        call.error = reply.infra_error
    elif reply.unanswered:  # the call's failure, not the infrastructure's
        call.error, call.charge_reserved = reply.unanswered, True
    elif client is None and hung_up(request):  # a paid provider's answer, read and metered
        call.client_gone = True
        call.error = "client disconnected before the answer (read to its end, metered)"
    try:
        if reply.streaming:
            assert client is not None
            return await _stream(client, reply, injected)
        if client is not None and reply.status == 200 and _answered(call, reply) and (
                restream or client.opened):
            return await _restream(client, reply)
        if client is not None and client.opened:  # the client's stream is open: the error in it
            return await client.fail(reply)
        response = _whole(call, env, reply)
    except asyncio.CancelledError:  # the run ended (``Gateway.stop``): the call's fate recorded
        _cancelled(call)
        raise
    finally:
        if not call.finished:
            await finish_call(call, env)
        _write_bodies(call, env, sent)
    return response


def whole_then_stream(call: Call) -> bool:
    """A streamed call to a model the gateway serves itself (``local/``): asked of its server
    whole and streamed to the client by the gateway (``_restream``). llama-cpp-python's server
    sends no usage in a stream, even when asked; its whole replies carry the exact counts, so
    such a call is metered exactly rather than n/a."""
    return call.stream and call.trial.model.served_here and call.upstream_api == "chat"


def _answered(call: Call, reply: UpstreamReply) -> bool:
    obj = loads_object(reply.body or b"")
    if obj is None:
        return False
    return bool(obj.get("choices")) if call.upstream_api == "chat" else "error" not in obj


async def _restream(client: ClientStream, reply: UpstreamReply) -> web.StreamResponse:
    """A whole chat reply (with choices) sent to a streaming client as a stream in its own API
    (the translation's stream writers, fed the completion's events); metered with the reply's
    usage before the client sees the end of the stream."""
    call, env = client.call, client.env
    body = reply.body or b""
    obj = loads_object(body)
    assert obj is not None
    call.status, call.upstream_bytes = 200, len(body)
    call.usage = body_usage(call.upstream_api, obj)
    writer = client.writer or translate.stream_writer(
        call.client_api, call.body, _client_model(call), call_id(call), client.framing)
    completion = translate.completion(call.upstream_api, obj)
    start = b""
    if not (client.opened and client.writer is not None):  # else sent when the stream opened
        # a Messages client reads the input usage from message_start: known here, sent there
        start = writer.start(completion.usage) if isinstance(writer, MessagesStreamWriter) \
            else writer.start()
    events = completion_events(completion)
    data = _scrub(start + b"".join(writer.feed(ev) for ev in events) + writer.end(),
                  env.secret)
    call.ttft = time.perf_counter() - call.t0
    call.bytes_out += len(data)
    if call.out_log is not None:
        call.out_log.append(data)
    await finish_call(call, env)  # before the client sees the end of the stream
    if client.opened:
        if not call.client_gone:
            await client.to_client(client.resp.write(data))
            await client.to_client(client.resp.write_eof())
        return client.resp
    resp = client.resp
    try:
        async with asyncio.timeout(env.write_timeout_s):
            await resp.prepare(client.request)
            await resp.write(data)
            await resp.write_eof()
    except (ConnectionError, RuntimeError, TimeoutError):
        pass  # the client went away: the call is metered all the same
    return resp


def _cancelled(call: Call) -> None:
    if call.status == 0:
        call.status = 499  # no reply came: what the upstream served is unknown
    call.error = CANCELLED_BY_HARNESS if call.error is None else \
        f"{call.error}; {CANCELLED_BY_HARNESS}"


def _whole(call: Call, env: CallEnv, reply: UpstreamReply) -> web.Response:
    body = reply.body or b""
    call.status = reply.status
    call.upstream_bytes = len(body)
    ctype = reply.content_type if reply.content_type else JSON
    if reply.status == 200:
        obj = loads_object(body)
        if obj is None:  # garbage, or another content type: the provider failed, not the agent
            call.status = 502
            call.error = f"upstream sent a malformed body ({reply.content_type or 'no content type'})"
            call.trial.infra_error = call.trial.infra_error or call.error
            body, ctype = error_bytes(call.client_api, 502, call.error), JSON
        elif call.upstream_api == "chat" and not obj.get("choices") and "error" not in obj:
            # a 200 without an answer: the provider failed (not the agent, which got nothing)
            call.usage = body_usage(call.upstream_api, obj)
            call.status = 502
            call.error = "upstream sent a 200 with no choices (no answer)"
            call.trial.infra_error = call.trial.infra_error or call.error
            body, ctype = error_bytes(call.client_api, 502, call.error), JSON
        else:
            call.usage = body_usage(call.upstream_api, obj)
            if call.translated:
                body, ctype = translate.render_whole(call.client_api, call.upstream_api, obj,
                                                     _client_model(call), call.seq), JSON
    else:
        if call.error is None:
            call.error = f"upstream {reply.status}"
        if call.translated or ctype != JSON:
            body, ctype = convert_error(body, reply.status, call.client_api), JSON
    body = _scrub(body, env.secret)
    call.bytes_out = len(body)
    if call.out_log is not None:
        call.out_log.append(body)
    return web.Response(status=call.status, body=body, content_type=ctype)


def call_id(call: Call) -> str:
    """The id of a translated reply: unique per call, without the trial's id (which names the
    task and would reach the agent)."""
    return f"gw{secrets.token_hex(8)}_{call.seq}"


def _client_model(call: Call) -> str:
    return str(call.body.get("model") or call.trial.model.name)


#: the error of a local provider's call whose client hung up: cancelled upstream, so the local
#: server stops generating for nobody (a paid provider's stream is read to its end instead)
LOCAL_CANCELLED = "upstream request cancelled (local provider: its client hung up)"
#: how often a local provider's call checks whether its client is still there
LOCAL_POLL_S = 0.25


def hung_up(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


#: how long a streamed call waits for its upstream's reply before it opens the client's stream
#: (headers, start events, then keep-alives): an upstream's quick refusal still reaches the
#: client as its HTTP status; a slow one (a local server that answers when its first token is
#: ready) leaves no client waiting for headers
OPEN_AFTER_S = 1.0


async def _send(request: web.Request, call: Call, env: CallEnv, req: UpstreamRequest,
                client: ClientStream | None) -> UpstreamReply | None:
    """The upstream's reply; for a local provider, ``None`` when the client hung up first (the
    request is then cancelled: its connection closed, which stops the server). While a streamed
    call (``client``) waits, its client's stream is opened after ``OPEN_AFTER_S`` and kept
    alive."""
    local = call.trial.model.local
    if not local and client is None:
        return await env.upstream.send(req)
    open_after = min(OPEN_AFTER_S, env.keepalive_s)
    tick = min(LOCAL_POLL_S if local else open_after, open_after)
    task = asyncio.ensure_future(env.upstream.send(req))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=tick)
            if done:
                return task.result()
            if local and hung_up(request):
                call.client_gone = True
                call.error = f"client disconnected; {LOCAL_CANCELLED}"
                call.status = 499
                return None
            if client is not None:
                if client.opened:
                    await client.keep_alive()
                elif time.perf_counter() - call.t0 >= open_after:
                    await client.open()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


#: a keep-alive in each client API's own form: Anthropic's ``ping`` event; an SSE comment for
#: the OpenAI APIs (ignored by SSE parsers; OpenAI-compatible servers send such comments).
#: Gemini: a blank line. The Google GenAI SDK (Gemini CLI) reads its SSE with a regex anchored
#: at the start of its buffer, ``^\s*data: (.*)\r\n\r\n``: a comment there would never be
#: consumed and would stall every later event; whitespace is taken with the next event (and is
#: whitespace between the items of the JSON-array form too). See docs/agents.md.
KEEPALIVES: dict[WireApi, bytes] = {
    "messages": b'event: ping\ndata: {"type": "ping"}\n\n',
    "chat": b": keep-alive\n\n",
    "responses": b": keep-alive\n\n",
    "gemini": b"\r\n",
}


def stream_error(api: WireApi, status: int, message: str) -> bytes:
    """An error inside a stream already answered 200, in the client API's own form: Anthropic's
    ``error`` event; Responses' ``response.failed``; a Chat chunk with ``error`` (OpenAI's SDKs
    raise it); Gemini, the error body on its own (the GenAI SDK raises a chunk that is an error
    object as an ``ApiError`` with its code)."""
    body = error_body(api, status, message)
    if api == "messages":
        return encode(body, "error")
    if api == "responses":
        err = body["error"]
        code = "rate_limit_exceeded" if status == 429 else err.get("code") or "server_error"
        return encode({"type": "response.failed", "response": {
            "id": f"gw_failed_{status}", "object": "response", "status": "failed",
            "error": {"code": code, "message": message}, "output": []}}, "response.failed")
    if api == "gemini":
        return json.dumps(body).encode() + b"\n"
    return encode(body)


class ClientStream:
    """The client's side of a streamed call: its 200 response, opened once (headers, then the
    translation's start events), its keep-alives and writes."""

    def __init__(self, request: web.Request, call: Call, env: CallEnv) -> None:
        self.request, self.call, self.env = request, call, env
        self.framing = Framing(call.sse) if call.client_api == "gemini" else None
        self.writer = translate.stream_writer(call.client_api, call.body, _client_model(call),
                                              call_id(call), self.framing) \
            if call.translated else None
        self.keepalive = KEEPALIVES.get(call.client_api)
        self.resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                            "Cache-Control": "no-cache"})
        if self.framing is not None and not self.framing.sse:  # a Gemini stream as one array
            self.resp.content_type = JSON
        self.sent_at = time.perf_counter()  # when the client was last sent something
        self.opened = False
        self.partial: Callable[[], bool] = lambda: False  # part of an event sent, not ended

    async def open(self) -> None:
        """Headers, then the translation's start events (once)."""
        if self.opened:
            return
        self.opened = True
        await self.to_client(self.resp.prepare(self.request))
        if self.writer is not None:
            await self.emit(self.writer.start(), content=False)

    async def to_client(self, step: Awaitable[Any]) -> None:
        call, env = self.call, self.env
        try:
            async with asyncio.timeout(env.write_timeout_s):
                await step
        except (ConnectionError, RuntimeError) as e:  # the client went away: keep reading
            call.client_gone = True
            call.error = f"client disconnected: {type(e).__name__}"
        except TimeoutError:  # the client takes nothing: drop it, keep reading the upstream
            call.client_gone = True
            call.error = f"client disconnected: took no data for {env.write_timeout_s:g} s"
            if self.request.transport is not None:
                self.request.transport.abort()

    async def emit(self, data: bytes, content: bool = True) -> None:
        """Send ``data``; ``content``: it carries the model's output (the first such is the
        time to first token; start events and keep-alives are not)."""
        call = self.call
        if not data or call.client_gone:
            return
        data = _scrub(data, self.env.secret)
        if content and call.ttft is None:
            call.ttft = time.perf_counter() - call.t0
        call.bytes_out += len(data)
        if call.out_log is not None:
            call.out_log.append(data)
        self.sent_at = time.perf_counter()
        await self.to_client(self.resp.write(data))

    async def keep_alive(self) -> None:
        """A keep-alive when the client heard nothing for ``keepalive_s`` (between events).
        A translated Responses stream gets an event (``ResponsesStreamWriter.keepalive``):
        Codex's idle timeout counts events, not bytes."""
        if self.keepalive is not None and not self.partial() and \
                time.perf_counter() - self.sent_at >= self.env.keepalive_s:
            await self.emit(self.writer.keepalive() if isinstance(
                self.writer, ResponsesStreamWriter) else self.keepalive, content=False)

    async def fail(self, reply: UpstreamReply) -> web.StreamResponse:
        """An upstream reply that is no answer (an error status, a malformed body) once the
        stream is open: metered as ``_whole`` meters it, sent as the client API's stream error
        (``stream_error``), and the stream ended."""
        call = self.call
        sent, logged = call.bytes_out, len(call.out_log) if call.out_log is not None else 0
        answer = _whole(call, self.env, reply)
        body = answer.body if isinstance(answer.body, bytes) else b""
        call.bytes_out = sent  # what ``_whole`` would have sent was not: the stream error is
        if call.out_log is not None:
            del call.out_log[logged:]
        await self.emit(stream_error(call.client_api, answer.status, error_message(body)),
                        content=False)
        if not call.client_gone:
            await self.to_client(self.resp.write_eof())
        return self.resp


async def _paced(chunks: AsyncIterator[bytes], every_s: float) -> AsyncGenerator[bytes | None, None]:
    """The upstream's chunks, and ``None`` after each ``every_s`` without one (the gateway then
    sends the client a keep-alive). The read under way is never cancelled by the pacing."""
    it = aiter(chunks)
    nxt: asyncio.Future[bytes] | None = None
    try:
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(anext(it))
            done, _ = await asyncio.wait({nxt}, timeout=every_s)
            if not done:
                yield None
                continue
            fut, nxt = nxt, None
            try:
                chunk = fut.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt


def _usage_only(ev: SseEvent) -> bool:
    if '"usage"' not in ev.data:
        return False
    obj = loads_object(ev.data)
    return obj is not None and obj.get("choices") == [] and isinstance(obj.get("usage"), dict)


async def _stream(client: ClientStream, reply: UpstreamReply,
                  drop_usage_chunk: bool) -> web.StreamResponse:
    assert reply.chunks is not None
    request, call, env = client.request, client.call, client.env
    call.status = 200
    parser, tracker = SseParser(), StreamUsage(call.upstream_api)
    framing, writer, reader = client.framing, client.writer, None
    if writer is not None:
        reader = translate.stream_reader(call.upstream_api)
    client.partial = lambda: parser.partial
    emit, keep_alive = client.emit, client.keep_alive

    def translated(events: list[SseEvent]) -> bytes:
        assert reader is not None and writer is not None
        objects = [obj for ev in events if ev.data != "[DONE]"
                   and (obj := loads_object(ev.data)) is not None]
        return translate.translate_events(reader, writer, objects)

    def reframed(events: list[SseEvent]) -> bytes:
        assert framing is not None
        return b"".join(framing.item(ev.data) for ev in events if ev.data)

    await client.open()  # start events at once: a client waiting for a slow first token hears
    broke = cancelled_locally = False
    local = call.trial.model.local
    paced = _paced(reply.chunks, min(env.keepalive_s, LOCAL_POLL_S) if local else env.keepalive_s)
    try:
        try:
            async for chunk in paced:
                if chunk is None:  # quiet upstream: keep the client's connection alive
                    if local and hung_up(request):
                        call.client_gone = True
                        call.error = "client disconnected"
                    else:
                        await keep_alive()
                if call.client_gone and local:  # stop the local server generating for nobody
                    call.error = f"{call.error}; {LOCAL_CANCELLED}"
                    if reply.abort is not None:
                        reply.abort()
                    cancelled_locally = True
                    break
                if chunk is None:
                    continue
                call.upstream_bytes += len(chunk)
                events = parser.feed(chunk)
                for ev in events:
                    tracker.feed(ev)
                if call.client_gone:
                    continue
                if writer is not None:
                    out = translated(events)
                elif framing is not None and not framing.sse:
                    out = reframed(events)
                elif drop_usage_chunk:
                    out = b"".join(ev.raw for ev in events if not _usage_only(ev))
                else:
                    out = chunk
                await emit(out, content=bool(events))  # a keep-alive comment is no token
                await keep_alive()  # e.g. the upstream's own keep-alives, not forwarded as such
            rest = [] if cancelled_locally else parser.flush()
            for ev in rest:
                tracker.feed(ev)
            if writer is not None:
                assert reader is not None
                tail = translated(rest) + b"".join(writer.feed(ne) for ne in reader.close())
                await emit(tail + writer.end())
            elif framing is not None and not framing.sse:
                await emit(reframed(rest) + framing.close())
            elif drop_usage_chunk:
                await emit(b"".join(ev.raw for ev in rest if not _usage_only(ev)))
        except (TimeoutError, aiohttp.ClientError) as e:
            _upstream_problem(call, f"upstream stream broke: {type(e).__name__}: {e}")
            broke = True
        if tracker.error:
            _upstream_problem(call, f"upstream stream error: {tracker.error}")
        elif not (tracker.finished or broke or cancelled_locally):  # truncated, or not this API
            _upstream_problem(call, "upstream stream ended without its final event")
            call.trial.infra_error = call.trial.infra_error or call.error
        elif tracker.finished and tracker.empty:  # a whole stream without an answer
            _upstream_problem(call, "upstream stream had no choices (no answer)")
            call.trial.infra_error = call.trial.infra_error or call.error
    finally:
        call.usage = tracker.usage
        await paced.aclose()  # its read under way ends now (a loop left early leaves it open)
        await reply.release()
    await finish_call(call, env)  # before the client sees the end of the stream
    if not call.client_gone:
        await client.to_client(client.resp.write_eof())
    return client.resp


def _upstream_problem(call: Call, problem: str) -> None:
    """The upstream's fault; after the client's own disconnect when both happened."""
    if call.error is None:
        call.error = problem
    elif call.client_gone and "; " not in call.error:
        call.error = f"{call.error}; {problem}"

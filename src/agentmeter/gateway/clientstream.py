"""The client's side of a streamed call (``ClientStream``): its 200 response opened once, its
keep-alives in each client API's own form, an upstream stream read to its end and relayed
(translated or reframed as needed: ``_stream``), a whole reply sent as a stream (``_restream``),
and an error inside a stream already answered (``stream_error``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from agentmeter.gateway import translate
from agentmeter.gateway.call import (
    JSON,
    LOCAL_CANCELLED,
    LOCAL_POLL_S,
    Call,
    CallEnv,
    _client_model,
    _scrub,
    _whole,
    call_id,
    finish_call,
    hung_up,
)
from agentmeter.gateway.errors import error_body, error_message
from agentmeter.gateway.httpclient import UpstreamError
from agentmeter.gateway.httprequest import Request
from agentmeter.gateway.httpresponse import StreamResponse
from agentmeter.gateway.metering import StreamUsage, body_usage
from agentmeter.gateway.neutral import completion_events
from agentmeter.gateway.sse import SseEvent, SseParser, encode, loads_object
from agentmeter.gateway.upstream import UpstreamReply
from agentmeter.gateway.wire_gemini import Framing
from agentmeter.gateway.wire_messages import MessagesStreamWriter
from agentmeter.gateway.wire_responses import ResponsesStreamWriter
from agentmeter.records import WireApi


async def _restream(client: ClientStream, reply: UpstreamReply) -> StreamResponse:
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

    def __init__(self, request: Request, call: Call, env: CallEnv) -> None:
        self.request, self.call, self.env = request, call, env
        self.framing = Framing(call.sse) if call.client_api == "gemini" else None
        self.writer = translate.stream_writer(call.client_api, call.body, _client_model(call),
                                              call_id(call), self.framing) \
            if call.translated else None
        self.keepalive = KEEPALIVES.get(call.client_api)
        self.resp = StreamResponse(200, {"Content-Type": "text/event-stream",
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
        """One step of the response (``StreamResponse``: each write waits for the client up to
        the write deadline, then aborts the connection and raises TimeoutError)."""
        call = self.call
        try:
            await step
        except (ConnectionError, RuntimeError) as e:  # the client went away: keep reading
            call.client_gone = True
            call.error = f"client disconnected: {type(e).__name__}"
        except TimeoutError:  # the client takes nothing: dropped, keep reading the upstream
            call.client_gone = True
            call.error = f"client disconnected: took no data for {self.env.write_timeout_s:g} s"

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

    async def fail(self, reply: UpstreamReply) -> StreamResponse:
        """An upstream reply that is no answer (an error status, a malformed body) once the
        stream is open: metered as ``_whole`` meters it, sent as the client API's stream error
        (``stream_error``), and the stream ended."""
        call = self.call
        sent, logged = call.bytes_out, len(call.out_log) if call.out_log is not None else 0
        answer = _whole(call, self.env, reply)
        body = answer.body
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
                  drop_usage_chunk: bool) -> StreamResponse:
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
        except (TimeoutError, UpstreamError) as e:
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

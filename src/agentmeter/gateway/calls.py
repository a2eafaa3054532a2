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
import time

from agentmeter.gateway import translate
from agentmeter.gateway.call import (
    JSON,
    LOCAL_CANCELLED,
    LOCAL_POLL_S,
    Call,
    CallEnv,
    _cancelled,
    _whole,
    _write_bodies,
    finish_call,
    hung_up,
    upstream_body,
)
from agentmeter.gateway.clientstream import ClientStream, _restream, _stream
from agentmeter.gateway.errors import error_bytes, gemini_budget_bytes
from agentmeter.gateway.httprequest import Request
from agentmeter.gateway.httpresponse import Response, StreamResponse
from agentmeter.gateway.metering import REQUEST_REFUSED
from agentmeter.gateway.sse import loads_object
from agentmeter.gateway.upstream import FORWARDED_HEADERS, UpstreamReply, UpstreamRequest

#: refused requests recorded per trial (``refuse_request``); the rest are only counted
MAX_RECORDED_REFUSALS = 1000


async def refuse_budget(call: Call, env: CallEnv, reason: str) -> Response:
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
    return Response(call.status, body, JSON)


async def refuse_request(call: Call, env: CallEnv, message: str, reason: str) -> Response:
    """A request the gateway will not serve (``hosted``): a 400 the agent sees, recorded as a
    refusal (never sent upstream, charged nothing, not counted against ``max_calls``). Beyond
    ``MAX_RECORDED_REFUSALS`` in a trial they are answered, counted, no longer recorded: an
    agent looping on refusals (a few hundred a second) would fill the runner's memory and the
    store with records (security review 2)."""
    call.status, body = 400, error_bytes(call.client_api, 400, message)
    call.trial.refused += 1
    if call.trial.refused > MAX_RECORDED_REFUSALS:
        return Response(call.status, body, JSON)
    call.seq = call.trial.take_seq()
    call.error = f"{REQUEST_REFUSED}: {reason}"
    call.bytes_out = len(body)
    await finish_call(call, env)
    return Response(call.status, body, JSON)


async def forward(request: Request, call: Call, env: CallEnv) -> Response | StreamResponse:
    try:
        sent, injected = upstream_body(call)
    except translate.UnsupportedRequest as e:  # refused before it is a call: not metered
        return Response(400, error_bytes(call.client_api, 400, str(e)), JSON)
    restream = whole_then_stream(call)
    if restream:
        sent = {k: v for k, v in sent.items() if k != "stream_options"}
        sent["stream"] = False
    call.seq = call.trial.take_seq()
    call.trial.running.add(call.seq)  # started: its trial's totals wait for it (n/a until then)
    if env.bodies_dir is not None:
        call.out_log = []
    headers = forwarded_headers(request)
    req = UpstreamRequest(call.upstream_api, sent, call.stream and not restream, headers,
                          cache_key=call.trial.trial_id,
                          solution_script=call.trial.scripted.solution_script)
    client = ClientStream(request, call, env) if call.stream else None
    try:
        got = await _send(request, call, env, req, client)
        if got is None:  # a local provider's client hung up: nobody to answer
            await finish_call(call, env)
            return client.resp if client is not None and client.opened else \
                Response(499, close=True)
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


def forwarded_headers(request: Request) -> dict[str, str]:
    """The client's headers the upstream may see (``FORWARDED_HEADERS``, lower-case names; of a
    repeated header its last value), looked up by name rather than copying every header."""
    headers: dict[str, str] = {}
    for name in FORWARDED_HEADERS:
        values = request.headers.getall(name)
        if values:
            headers[name] = values[-1]
    return headers


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



#: how long a streamed call waits for its upstream's reply before it opens the client's stream
#: (headers, start events, then keep-alives): an upstream's quick refusal still reaches the
#: client as its HTTP status; a slow one (a local server that answers when its first token is
#: ready) leaves no client waiting for headers
OPEN_AFTER_S = 1.0


async def _send(request: Request, call: Call, env: CallEnv, req: UpstreamRequest,
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

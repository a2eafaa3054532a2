"""A model call's state and its metering: the ``Call`` and what it needs from the gateway
(``CallEnv``), its worst case reserved and settled, its finish (metered, charged to its trial,
handed to the trial's sink), a whole reply metered (``_whole``), and the ids and checks the
forwarding (calls.py) and the client's stream (clientstream.py) share."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmeter.gateway import translate
from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.errors import convert_error, error_bytes
from agentmeter.gateway.httprequest import Request
from agentmeter.gateway.httpresponse import Response
from agentmeter.gateway.metering import Reservation, TrialState, body_usage
from agentmeter.gateway.neutral import NeutralUsage
from agentmeter.gateway.persist import CallWriter
from agentmeter.gateway.sse import loads_object
from agentmeter.gateway.upstream import Upstream, UpstreamReply
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
    answers = translate.choices(call.client_api, call.body)
    tokens = call.bytes_in + output_reserve(call) * answers
    usd = prices.max_charge_usd(call.trial.model.price_key, tokens, call.bytes_in) \
        if call.trial.priced and call.trial.budget.max_usd is not None else None
    return Reservation(tokens=tokens, usd=usd or 0.0, answers=answers)


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

    d = env.bodies_dir / call.trial.trial_id
    d.mkdir(parents=True, exist_ok=True)
    stem = f"{call.seq:05d}"
    (d / f"{stem}-request.json").write_text(json.dumps(call.body, indent=1))
    if sent is not None and call.translated:
        (d / f"{stem}-upstream-request.json").write_text(json.dumps(sent, indent=1))
    ext = "sse" if call.stream and call.status == 200 else "json"
    (d / f"{stem}-response.{ext}").write_bytes(b"".join(call.out_log or []))

def _cancelled(call: Call) -> None:
    if call.status == 0:
        call.status = 499  # no reply came: what the upstream served is unknown
    call.error = CANCELLED_BY_HARNESS if call.error is None else \
        f"{call.error}; {CANCELLED_BY_HARNESS}"


def _whole(call: Call, env: CallEnv, reply: UpstreamReply) -> Response:
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
    return Response(call.status, body, ctype)


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


def hung_up(request: Request) -> bool:
    return request.hung_up()

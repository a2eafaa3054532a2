"""The harness's judge client: a verifier's model calls, from the host, through the gateway.

For one trial's verification, :class:`GatewayJudge` opens its own gateway trial
(``<trial id>#judge``) under the run's judge model, on the first call. Its calls are stored as
they complete with the trial (``purpose = "judge"``, numbered after the agent's calls) and never
count in the trial's agent usage, cost or budgets; their totals become the trial's
``extra["evaluation"]`` (:func:`evaluation_extra`). A call the gateway cannot complete (the
upstream still failing after its retries, a refusal, a reply without text) raises
``VerificationError``: the trial is infra_invalid, never a zero.

The client speaks OpenAI Chat Completions (temperature 0 by default; images as data-URL image
parts), or Anthropic Messages for a model that speaks only that (the gateway does not translate
from Chat to it). When the verifier gives the reply's JSON schema and the judge model declares
constrained decoding (``UpstreamModel.structured_output``: the ``local/`` models and
``llamacpp/`` by default, any model of a models file by its ``structured_output`` key), a Chat
call carries it as ``response_format``: a small local model can then only emit an object of that
shape. The verifier still parses the reply strictly.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from agentmeter.gateway import Gateway, ScriptedContext, TrialMeter
from agentmeter.gateway.errors import error_message
from agentmeter.gateway.metering import CallSink, StoreSink
from agentmeter.gateway.registry import StructuredOutput, UpstreamModel
from agentmeter.records import ModelCallRecord, WireApi
from agentmeter.verify.judge import JudgeImage, JudgeMessage, JudgeReply
from agentmeter.verify.protocol import VerificationError

JUDGE_SUFFIX = "#judge"
#: output cap sent when the verifier gives none (every judge call has one: a model that never
#: ends its reply would otherwise generate to its context limit; verify/judge.py has the verifiers'
#: own caps)
DEFAULT_MAX_TOKENS = 4096
#: how long one judge call may take (a timeout is a VerificationError; the gateway then cancels a
#: local model's generation, its client having hung up)
CALL_TIMEOUT_S = 600.0
_PATHS: dict[WireApi, str] = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}


class JudgeModelError(ValueError):
    """The judge model cannot be used (checked before a run)."""


def judge_api(model: UpstreamModel) -> WireApi:
    """The API the judge client speaks to ``model`` (raises JudgeModelError if none)."""
    if "chat" in model.wire_apis or "gemini" in model.wire_apis:  # Gemini: translated from chat
        return "chat"
    if model.wire_api == "messages":
        return "messages"
    raise JudgeModelError(f"judge model {model.name!r} speaks only {model.wire_api}; a judge "
                          "needs one that speaks chat, messages or gemini")


def _image(img: JudgeImage, api: WireApi) -> dict[str, Any]:
    try:
        data = base64.b64encode(img.path.read_bytes()).decode()
    except OSError as e:
        raise VerificationError(f"judge image {img.path}: {e.strerror or e}") from e
    if api == "messages":
        return {"type": "image", "source": {"type": "base64", "media_type": img.media_type,
                                            "data": data}}
    return {"type": "image_url", "image_url": {"url": f"data:{img.media_type};base64,{data}"}}


def _content(msg: JudgeMessage, api: WireApi) -> str | list[dict[str, Any]]:
    if all(isinstance(p, str) for p in msg.content):
        return "\n".join(p for p in msg.content if isinstance(p, str))
    return [{"type": "text", "text": p} if isinstance(p, str) else _image(p, api)
            for p in msg.content]


def response_format(structured: StructuredOutput, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` asking for a reply that follows ``schema``, in ``structured``'s
    dialect (see ``gateway.registry.StructuredOutput``)."""
    if structured == "llamacpp":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}}


def request_body(api: WireApi, model: str, messages: Sequence[JudgeMessage], temperature: float,
                 max_tokens: int | None, schema: dict[str, Any] | None = None,
                 structured: StructuredOutput | None = None) -> dict[str, Any]:
    """The request for one judge call in ``api``'s shape (``schema`` sent only to a Chat model
    that declares ``structured`` output)."""
    body: dict[str, Any] = {"model": model, "temperature": temperature, "stream": False}
    if api == "messages":
        system = [_content(m, api) for m in messages if m.role == "system"]
        if system:
            body["system"] = "\n".join(s if isinstance(s, str) else json.dumps(s) for s in system)
        body["messages"] = [{"role": m.role, "content": _content(m, api)}
                            for m in messages if m.role != "system"]
        body["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS
    else:
        body["messages"] = [{"role": m.role, "content": _content(m, api)} for m in messages]
        body["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS
        if schema is not None and structured is not None:
            body["response_format"] = response_format(structured, schema)
    return body


def reply_text(api: WireApi, obj: Any) -> str | None:
    """The text of a reply body, or None when it has none."""
    if not isinstance(obj, dict):
        return None
    if api == "messages":
        blocks = obj.get("content")
        texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)] if isinstance(blocks, list) else []
        return "".join(texts) if texts else None
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


class GatewayJudge:
    """A ``verify.judge.JudgeClient`` for one trial's verification."""

    def __init__(self, gateway: Gateway, model: str, trial_id: str, sink: CallSink,
                 first_seq: int = 0, scripted: ScriptedContext | None = None,
                 timeout_s: float | None = CALL_TIMEOUT_S) -> None:
        self._gateway, self._model, self._trial_id = gateway, model, trial_id
        self._timeout_s = timeout_s
        self._sink, self._first_seq, self._scripted = sink, first_seq, scripted
        upstream = gateway.models.resolve(model)
        self._api = judge_api(upstream)
        self._structured = upstream.structured_output
        self._token: str | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def model(self) -> str:
        return self._model

    @property
    def gateway_trial(self) -> str:
        return self._trial_id + JUDGE_SUFFIX

    def _store(self, call: ModelCallRecord) -> None:
        """Each judge call stored with the trial being verified (the gateway's sink)."""
        assert not isinstance(self._sink, StoreSink)
        self._sink(call.model_copy(update={"trial_id": self._trial_id}))

    def _open(self) -> tuple[aiohttp.ClientSession, str, str]:
        gw = self._gateway
        if self._token is None:
            # a store's sink stores the judge's calls under the graded trial's id itself
            sink: CallSink = replace(self._sink, trial_id=self._trial_id) \
                if isinstance(self._sink, StoreSink) else self._store
            self._token = gw.open_trial(self.gateway_trial, self._model, sink=sink,
                                        purpose="judge", first_seq=self._first_seq,
                                        scripted=self._scripted)
        if self._session is None:
            if gw.unix_socket is not None:
                connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=str(gw.unix_socket))
                base = "http://agentmeter-gateway"
            else:
                connector, base = aiohttp.TCPConnector(), gw.base_url
            self._session = aiohttp.ClientSession(connector=connector, base_url=base)
        return self._session, self._token, _PATHS[self._api]

    async def complete(self, messages: Sequence[JudgeMessage], *, temperature: float = 0.0,
                       max_tokens: int | None = None,
                       schema: dict[str, Any] | None = None) -> JudgeReply:
        body = request_body(self._api, self._model, messages, temperature, max_tokens, schema,
                            self._structured)
        session, token, path = self._open()
        headers = {"Authorization": f"Bearer {token}"}
        if self._api == "messages":
            headers["anthropic-version"] = "2023-06-01"
        try:
            async with session.post(path, json=body, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=self._timeout_s)) as resp:
                status, raw = resp.status, await resp.read()
        except TimeoutError as e:
            raise VerificationError(f"judge {self._model}: no reply within "
                                    f"{self._timeout_s:g} s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise VerificationError(f"judge {self._model}: the gateway cannot be reached: "
                                    f"{type(e).__name__}: {e}") from e
        if status != 200:
            raise VerificationError(f"judge {self._model}: call failed ({status}): "
                                    f"{error_message(raw)[:300]}")
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            obj = None
        text = reply_text(self._api, obj)
        if text is None:
            raise VerificationError(f"judge {self._model}: the reply has no text")
        model = obj.get("model") if isinstance(obj, dict) else None
        return JudgeReply(text=text, model=model if isinstance(model, str) else self._model)

    async def close(self, *, settle: bool = True) -> TrialMeter | None:
        """End the judge's gateway trial (``settle``: after its calls under way are metered);
        its meter, or None when no call was made."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        if self._token is None:
            return None
        self._token = None
        gw = self._gateway
        meter = (await gw.finish_trial(self.gateway_trial) if settle
                 else gw.close_trial(self.gateway_trial))
        stored = set(meter.stored_seqs)  # the rest: the sink failed (e.g. the store was locked)
        for call in meter.calls:
            if call.seq not in stored:
                self._store(call)
        return meter


def merge_meters(meters: Sequence[TrialMeter]) -> TrialMeter:
    """Several gateway trials of one trial as one (a scenario step's rounds, its judges):
    calls and usage added up; the cost is n/a if any part's is."""
    first = meters[0]
    costs = [m.cost_usd for m in meters if m.calls or m.calls_in_flight]
    return first.model_copy(update={
        "calls": [c for m in meters for c in m.calls],
        "usage": sum((m.usage for m in meters[1:]), first.usage),
        "cost_usd": None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        "budget_exceeded": any(m.budget_exceeded for m in meters),
        "infra_error": next((m.infra_error for m in meters if m.infra_error), None),
        "charged_tokens": sum(m.charged_tokens for m in meters),
        "charged_usd": sum(m.charged_usd for m in meters),
        "calls_without_usage": sum(m.calls_without_usage for m in meters),
        "stored_seqs": [s for m in meters for s in m.stored_seqs],
        "sink_error": next((m.sink_error for m in meters if m.sink_error), None),
        "next_seq": max(m.next_seq for m in meters),
        "calls_in_flight": sorted({s for m in meters for s in m.calls_in_flight})})


def evaluation_extra(meter: TrialMeter) -> dict[str, Any]:
    """The trial's ``extra["evaluation"]``: what grading it cost, apart from the agent."""
    return {"model": meter.model, "calls": len(meter.calls),
            "usage": meter.usage.model_dump(), "cost_usd": meter.cost_usd}

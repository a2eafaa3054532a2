"""Which translation a call needs, with Chat Completions as the hub.

A client's request goes to its own API when the upstream speaks it; otherwise it becomes a chat
request and, for a Gemini-speaking upstream, a Gemini request from that. The upstream's reply is
read into neutral events or a neutral completion and written in the client's API.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from agentmeter.gateway import translate_gemini, translate_messages, translate_responses
from agentmeter.gateway.neutral import Completion, NeutralEvent
from agentmeter.gateway.wire_chat import (
    ChatStreamReader,
    ChatStreamWriter,
    completion_body,
    completion_from_body,
)
from agentmeter.gateway.wire_gemini import (
    Framing,
    GeminiStreamReader,
    GeminiStreamWriter,
    completion_from_gemini,
    gemini_body,
)
from agentmeter.gateway.wire_messages import MessagesStreamWriter, message_body
from agentmeter.gateway.wire_responses import ResponsesStreamWriter, response_body
from agentmeter.records import WireApi

StreamReader = ChatStreamReader | GeminiStreamReader
StreamWriter = ChatStreamWriter | ResponsesStreamWriter | MessagesStreamWriter | GeminiStreamWriter
UnsupportedRequest = translate_gemini.UnsupportedGemini


def upstream_api(client: WireApi, speaks: tuple[WireApi, ...]) -> WireApi | None:
    """The API a client's calls go to: its own, else chat, else Gemini; ``None`` when the
    upstream speaks neither (a Messages-only or Responses-only upstream)."""
    for api in (client, "chat", "gemini"):
        if api in speaks:
            return api
    return None


def to_chat(client: WireApi, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """A client's request as a chat request (raises ``UnsupportedRequest``)."""
    if client == "responses":
        return translate_responses.to_chat(body)
    if client == "messages":
        return translate_messages.to_chat(body)
    if client == "gemini":
        return translate_gemini.to_chat(body, stream)
    return dict(body)


def request_body(client: WireApi, upstream: WireApi, body: dict[str, Any], stream: bool,
                 model_id: str) -> tuple[dict[str, Any], bool]:
    """The body sent upstream and whether we added ``include_usage`` the client did not ask
    for (raises ``UnsupportedRequest``)."""
    translated = client != upstream
    if not translated:
        sent = dict(body)
    elif upstream == "gemini":
        sent = translate_gemini.from_chat(to_chat(client, body, stream))
    else:
        sent = to_chat(client, body, stream)
    if upstream != "gemini":  # Gemini names its model in the URL; its bodies have no such field
        sent["model"] = model_id
    injected = False
    if upstream == "chat" and sent.get("stream") is True:
        opts = sent.get("stream_options")
        opts = dict(opts) if isinstance(opts, dict) else {}
        if opts.get("include_usage") is not True:
            opts["include_usage"] = True
            injected = not translated
        sent["stream_options"] = opts
    return sent, injected


#: request fields that cap a reply's output tokens (reasoning included), per client API
MAX_OUTPUT_FIELDS: dict[WireApi, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"), "responses": ("max_output_tokens",),
    "messages": ("max_tokens",), "gemini": ("maxOutputTokens", "max_output_tokens")}


def _count(value: Any) -> int | None:
    """A token cap or answer count as a provider's parser may read it: an int, a finite number
    (proto3 JSON takes ``8.0``, pydantic's lax mode ``1000.0``) or a number in a string (proto3
    JSON and pydantic take ``"8"``), rounded up; None for anything else or below 1."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if text.lstrip("+-").isdigit() else float(text)
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = math.ceil(min(value, 2.0**62))  # a huge one reserves hugely (refused)
    return value if isinstance(value, int) and value > 0 else None


def _largest(holders: list[Any], names: tuple[str, ...]) -> int | None:
    """The largest count under any of ``names`` in any of ``holders`` (every spelling a
    provider may honour: the reservation must cover whichever it picks)."""
    found = [c for h in holders if isinstance(h, dict) for n in names
             if (c := _count(h.get(n))) is not None]
    return max(found) if found else None


def _gemini_configs(body: dict[str, Any]) -> list[Any]:
    return [body.get("generationConfig"), body.get("generation_config")]


def output_cap(client: WireApi, body: dict[str, Any]) -> int | None:
    """The request's output cap: the largest of its cap fields in every spelling (a client
    writing two caps, or a number as a string, reserves what the provider may generate)."""
    holders = _gemini_configs(body) if client == "gemini" else [body]
    return _largest(holders, MAX_OUTPUT_FIELDS[client])


def choices(client: WireApi, body: dict[str, Any]) -> int:
    """How many answers the request asks for: chat ``n``, Gemini ``candidateCount`` (each up
    to the output cap; every spelling, the largest); 1 for the others."""
    if client == "chat":
        value = _largest([body], ("n",))
    elif client == "gemini":
        value = _largest(_gemini_configs(body), ("candidateCount", "candidate_count"))
    else:
        return 1
    return value if value is not None and value > 1 else 1


def with_output_cap(upstream: WireApi, sent: dict[str, Any], cap: int,
                    base_url: str) -> dict[str, Any]:
    """The upstream body with ``cap`` as its output cap when it has none (in the upstream API's
    own field; chat: ``max_completion_tokens`` for OpenAI itself, whose reasoning models refuse
    ``max_tokens``, else ``max_tokens``, which every compatible server reads)."""
    if output_cap(upstream, sent) is not None:
        return sent
    out = dict(sent)
    if upstream == "gemini":
        key = "generation_config" if "generation_config" in sent else "generationConfig"
        config = sent.get(key)
        config = dict(config) if isinstance(config, dict) else {}
        snake = key == "generation_config" or "max_output_tokens" in config
        config["max_output_tokens" if snake else "maxOutputTokens"] = cap
        out[key] = config
    elif upstream == "chat":
        openai = base_url.startswith("https://api.openai.com/")
        out["max_completion_tokens" if openai else "max_tokens"] = cap
    else:
        out[MAX_OUTPUT_FIELDS[upstream][0]] = cap
    return out


def completion(upstream: WireApi, obj: dict[str, Any]) -> Completion:
    return completion_from_gemini(obj) if upstream == "gemini" else completion_from_body(obj)


def render_whole(client: WireApi, upstream: WireApi, obj: dict[str, Any], model: str,
                 seq: int) -> bytes:
    """An upstream's whole reply body in the client's API."""
    c = completion(upstream, obj)
    rid = str(obj.get("id") or obj.get("responseId") or f"gw{seq}")
    out: dict[str, Any]
    if client == "responses":
        out = response_body(c, model, f"resp_{rid}", int(time.time()))
    elif client == "messages":
        out = message_body(c, model, f"msg_{rid}")
    elif client == "gemini":
        out = gemini_body(c, model, rid)
    else:
        out = completion_body(c, model, f"chatcmpl-{rid}", int(time.time()))
    return json.dumps(out).encode()


def stream_reader(upstream: WireApi) -> StreamReader:
    return GeminiStreamReader() if upstream == "gemini" else ChatStreamReader()


def stream_writer(client: WireApi, body: dict[str, Any], model: str, resp_id: str,
                  framing: Framing | None) -> StreamWriter:
    """The writer of a translated stream; ``framing`` for Gemini clients."""
    if client == "responses":
        return ResponsesStreamWriter(model, f"resp_{resp_id}", int(time.time()))
    if client == "messages":
        return MessagesStreamWriter(model, f"msg_{resp_id}")
    if client == "gemini":
        return GeminiStreamWriter(model, resp_id, framing or Framing(sse=True))
    opts = body.get("stream_options")
    include = isinstance(opts, dict) and opts.get("include_usage") is True
    return ChatStreamWriter(model, f"chatcmpl-{resp_id}", int(time.time()), include)


def translate_events(reader: StreamReader, writer: StreamWriter,
                     objects: list[dict[str, Any]]) -> bytes:
    out = b""
    for obj in objects:
        events: list[NeutralEvent] = reader.feed(obj)
        for ne in events:
            out += writer.feed(ne)
    return out

"""Google's Gemini API (``generateContent``) on the wire: render completions and streams, read
them back.

A stream is a sequence of whole ``GenerateContentResponse`` objects: with ``?alt=sse`` each is a
``data:`` event, without it they are the items of one JSON array sent piece by piece
(``Framing``). Function calls arrive whole (name and arguments in one part); thought parts
(``thought: true``) are reasoning, never visible text. Fields are read in camelCase and, as the
API also accepts, snake_case.
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.neutral import (
    Completion,
    Finish,
    FinishReason,
    NeutralEvent,
    NeutralUsage,
    TextDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
    UsageReport,
)

_TO_GEMINI: dict[FinishReason, str] = {
    "stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_FROM_GEMINI: dict[str, FinishReason] = {
    "STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
    "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter"}


def field(d: Any, camel: str) -> Any:
    """``d[camel]``, or its snake_case spelling; ``None`` when ``d`` is not an object."""
    if not isinstance(d, dict):
        return None
    if camel in d:
        return d[camel]
    snake = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in camel)
    return d.get(snake)


def parts_of(content: Any) -> list[dict[str, Any]]:
    parts = field(content, "parts")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def args_object(arguments: str) -> dict[str, Any]:
    """Chat-style JSON argument text → the object Gemini's ``functionCall.args`` must be."""
    try:
        value = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _call_part(t: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"id": t.id, "name": t.name, "args": args_object(t.arguments)}}


def _chunk(parts: list[dict[str, Any]], model: str, resp_id: str, finish: FinishReason | None,
           usage: NeutralUsage | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = _TO_GEMINI[finish]
    out: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        out["usageMetadata"] = usage_fields.to_gemini(usage)
    out["modelVersion"] = model
    out["responseId"] = resp_id
    return out


def gemini_body(c: Completion, model: str, resp_id: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": c.text}] if c.text else []
    parts += [_call_part(t) for t in c.tool_calls]
    return _chunk(parts or [{"text": ""}], model, resp_id, c.finish, c.usage)


class Framing:
    """How a stream's response objects are sent: SSE events, or the items of one JSON array."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self._items = 0

    def item(self, data: str) -> bytes:
        if self.sse:
            return f"data: {data}\r\n\r\n".encode()
        head = "[" if self._items == 0 else ",\r\n"
        self._items += 1
        return (head + data).encode()

    def close(self) -> bytes:
        if self.sse:
            return b""
        return b"]" if self._items else b"[]"


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


class GeminiStreamWriter:
    """Neutral events → a Gemini stream. Text is sent as it comes; function calls (whole in
    Gemini's stream) are held until the end and sent with the finish reason and usage."""

    def __init__(self, model: str, resp_id: str, framing: Framing) -> None:
        self._model, self._id, self._framing = model, resp_id, framing
        self._calls: dict[int, ToolCall] = {}
        self._finish: FinishReason = "stop"
        self._usage: NeutralUsage | None = None

    def start(self) -> bytes:
        return b""

    def feed(self, ev: NeutralEvent) -> bytes:
        if isinstance(ev, TextDelta):
            return self._framing.item(_dumps(_chunk([{"text": ev.text}], self._model, self._id,
                                                    None, None)))
        if isinstance(ev, ToolCallStart):
            self._calls[ev.index] = ToolCall(ev.id, ev.name, "")
        elif isinstance(ev, ToolArgsDelta):
            if ev.index in self._calls:
                self._calls[ev.index].arguments += ev.delta
        elif isinstance(ev, Finish):
            self._finish = ev.reason
        elif isinstance(ev, UsageReport):
            self._usage = ev.usage
        return b""

    def end(self) -> bytes:
        parts = [_call_part(t) for t in self._calls.values()] or [{"text": ""}]
        last = _chunk(parts, self._model, self._id, self._finish, self._usage or NeutralUsage())
        return self._framing.item(_dumps(last)) + self._framing.close()


def _finish_of(reason: str, tool_calls: bool) -> FinishReason:
    if tool_calls and reason == "STOP":
        return "tool_calls"
    return _FROM_GEMINI.get(reason, "stop")


def _candidate(obj: dict[str, Any]) -> dict[str, Any]:
    cands = obj.get("candidates")
    return cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else {}


class GeminiStreamReader:
    """Gemini stream objects → neutral events (for clients of other APIs)."""

    def __init__(self) -> None:
        self._calls = 0
        self._finished = False
        self._usage: NeutralUsage | None = None
        self._usage_sent = False

    def feed(self, obj: dict[str, Any]) -> list[NeutralEvent]:
        out: list[NeutralEvent] = []
        cand = _candidate(obj)
        for part in parts_of(cand.get("content")):
            text = part.get("text")
            fc = field(part, "functionCall")
            if isinstance(text, str) and text and part.get("thought") is not True:
                out.append(TextDelta(text))
            elif isinstance(fc, dict):
                index = self._calls
                self._calls += 1
                out.append(ToolCallStart(index, str(fc.get("id") or f"call_{index}"),
                                         str(fc.get("name") or "")))
                out.append(ToolArgsDelta(index, json.dumps(fc.get("args") or {})))
        meta = field(obj, "usageMetadata")
        if isinstance(meta, dict):
            self._usage = usage_fields.from_gemini(meta)
        reason = field(cand, "finishReason")
        if isinstance(reason, str) and not self._finished:
            self._finished = True
            out.append(Finish(_finish_of(reason, self._calls > 0)))
        if self._finished:
            out += self.close()
        return out

    def close(self) -> list[NeutralEvent]:
        """The usage, once, when it was not sent with the finish."""
        if self._usage is None or self._usage_sent:
            return []
        self._usage_sent = True
        return [UsageReport(self._usage)]


def completion_from_gemini(body: dict[str, Any]) -> Completion:
    """A whole ``GenerateContentResponse`` → neutral completion."""
    c = Completion()
    cand = _candidate(body)
    texts: list[str] = []
    for part in parts_of(cand.get("content")):
        text = part.get("text")
        fc = field(part, "functionCall")
        if isinstance(text, str) and part.get("thought") is not True:
            texts.append(text)
        elif isinstance(fc, dict):
            n = len(c.tool_calls)
            c.tool_calls.append(ToolCall(str(fc.get("id") or f"call_{n}"), str(fc.get("name") or ""),
                                         json.dumps(fc.get("args") or {})))
    c.text = "".join(texts)
    reason = field(cand, "finishReason")
    if isinstance(reason, str):
        c.finish = _finish_of(reason, bool(c.tool_calls))
    elif not cand and field(body, "promptFeedback") is not None:
        c.finish = "content_filter"  # the prompt was blocked
    elif c.tool_calls:
        c.finish = "tool_calls"
    c.usage = usage_fields.from_gemini(field(body, "usageMetadata"))
    return c

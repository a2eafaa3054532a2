"""Anthropic Messages API on the wire: render completions and the real streaming event sequence."""

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
    ToolCallStart,
    UsageReport,
)
from agentmeter.gateway.sse import encode

_STOP: dict[FinishReason, str] = {
    "stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
    "content_filter": "refusal",
}


def _input_object(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def message_body(c: Completion, model: str, msg_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if c.text:
        content.append({"type": "text", "text": c.text})
    for t in c.tool_calls:
        content.append({"type": "tool_use", "id": t.id, "name": t.name,
                        "input": _input_object(t.arguments)})
    return {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": _STOP[c.finish], "stop_sequence": None,
        "usage": usage_fields.to_messages(c.usage),
    }


class MessagesStreamWriter:
    """Neutral events → Anthropic SSE (``message_start`` … ``message_stop``).

    ``message_start`` carries the input usage when it is known up front (the scripted model);
    otherwise (translation) the whole usage goes into ``message_delta``, as the newer API does.
    """

    def __init__(self, model: str, msg_id: str) -> None:
        self._model, self._id = model, msg_id
        self._block = -1
        self._open: str | None = None  # "text" | "tool_use"
        self._tool_index: int | None = None
        self._finish: FinishReason = "stop"
        self._usage: NeutralUsage | None = None

    def start(self, known_usage: NeutralUsage | None = None) -> bytes:
        u = usage_fields.to_messages(known_usage or NeutralUsage(input=0))
        u["output_tokens"] = 1 if known_usage is not None else 0
        message: dict[str, Any] = {
            "id": self._id, "type": "message", "role": "assistant", "model": self._model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": u}
        return encode({"type": "message_start", "message": message}, "message_start") + encode(
            {"type": "ping"}, "ping")

    def _stop_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return encode({"type": "content_block_stop", "index": self._block}, "content_block_stop")

    def feed(self, ev: NeutralEvent) -> bytes:
        out = b""
        if isinstance(ev, TextDelta):
            if self._open != "text":
                out += self._stop_block()
                self._block += 1
                self._open = "text"
                out += encode({"type": "content_block_start", "index": self._block,
                               "content_block": {"type": "text", "text": ""}},
                              "content_block_start")
            out += encode({"type": "content_block_delta", "index": self._block,
                           "delta": {"type": "text_delta", "text": ev.text}},
                          "content_block_delta")
        elif isinstance(ev, ToolCallStart):
            out += self._stop_block()
            self._block += 1
            self._open, self._tool_index = "tool_use", ev.index
            out += encode({"type": "content_block_start", "index": self._block,
                           "content_block": {"type": "tool_use", "id": ev.id, "name": ev.name,
                                             "input": {}}}, "content_block_start")
        elif isinstance(ev, ToolArgsDelta):
            if self._open == "tool_use" and self._tool_index == ev.index:
                out += encode({"type": "content_block_delta", "index": self._block,
                               "delta": {"type": "input_json_delta", "partial_json": ev.delta}},
                              "content_block_delta")
        elif isinstance(ev, Finish):
            self._finish = ev.reason
        elif isinstance(ev, UsageReport):
            self._usage = ev.usage
        return out

    def end(self) -> bytes:
        out = self._stop_block()
        u = usage_fields.to_messages(self._usage or NeutralUsage())
        out += encode({"type": "message_delta",
                       "delta": {"stop_reason": _STOP[self._finish], "stop_sequence": None},
                       "usage": u}, "message_delta")
        return out + encode({"type": "message_stop"}, "message_stop")

"""OpenAI Chat Completions on the wire: render completions and streams, read them back."""

from __future__ import annotations

import json
from typing import Any

from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.neutral import (
    Completion,
    Finish,
    FinishReason,
    NeutralEvent,
    TextDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
    UsageReport,
)
from agentmeter.gateway.sse import encode

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def completion_body(c: Completion, model: str, resp_id: str, created: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": c.text or None}
    if c.tool_calls:
        message["tool_calls"] = [
            {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
            for t in c.tool_calls
        ]
    return {
        "id": resp_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": c.finish, "logprobs": None}],
        "usage": usage_fields.to_chat(c.usage),
    }


class ChatStreamWriter:
    """Neutral events → ``chat.completion.chunk`` SSE bytes."""

    def __init__(self, model: str, resp_id: str, created: int, include_usage: bool) -> None:
        self._base = {"id": resp_id, "object": "chat.completion.chunk", "created": created,
                      "model": model}
        self._include_usage = include_usage
        self._tool_slots: dict[int, int] = {}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return encode({**self._base, "choices": [choice]})

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def feed(self, ev: NeutralEvent) -> bytes:
        if isinstance(ev, TextDelta):
            return self._chunk({"content": ev.text})
        if isinstance(ev, ToolCallStart):
            slot = self._tool_slots.setdefault(ev.index, len(self._tool_slots))
            call = {"index": slot, "id": ev.id, "type": "function",
                    "function": {"name": ev.name, "arguments": ""}}
            return self._chunk({"tool_calls": [call]})
        if isinstance(ev, ToolArgsDelta):
            slot = self._tool_slots.get(ev.index, ev.index)
            args = {"index": slot, "function": {"arguments": ev.delta}}
            return self._chunk({"tool_calls": [args]})
        if isinstance(ev, Finish):
            return self._chunk({}, ev.reason)
        if self._include_usage:
            return encode({**self._base, "choices": [], "usage": usage_fields.to_chat(ev.usage)})
        return b""

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"


class ChatStreamReader:
    """``chat.completion.chunk`` objects → neutral events (for translation to other APIs)."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._finished = False

    def feed(self, chunk: dict[str, Any]) -> list[NeutralEvent]:
        out: list[NeutralEvent] = []
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            assert isinstance(delta, dict)
            text = delta.get("content")
            if isinstance(text, str) and text:
                out.append(TextDelta(text))
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                index = call.get("index", 0) if isinstance(call.get("index"), int) else 0
                fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                assert isinstance(fn, dict)
                if index not in self._ids:
                    self._ids[index] = str(call.get("id") or f"call_{index}")
                    out.append(ToolCallStart(index, self._ids[index], str(fn.get("name") or "")))
                args = fn.get("arguments")
                if isinstance(args, str) and args:
                    out.append(ToolArgsDelta(index, args))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and not self._finished:
                self._finished = True
                out.append(Finish(_FINISH.get(reason, "stop")))
        if isinstance(chunk.get("usage"), dict):
            out.append(UsageReport(usage_fields.from_chat(chunk["usage"])))
        return out

    def close(self) -> list[NeutralEvent]:
        return []


def completion_from_body(body: dict[str, Any]) -> Completion:
    """A non-stream chat completion → neutral completion."""
    c = Completion()
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
        assert isinstance(msg, dict)
        content = msg.get("content")
        c.text = content if isinstance(content, str) else ""
        for i, call in enumerate(msg.get("tool_calls") or []):
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                fn = call["function"]
                args = fn.get("arguments")
                c.tool_calls.append(ToolCall(str(call.get("id") or f"call_{i}"),
                                             str(fn.get("name") or ""),
                                             args if isinstance(args, str) else json.dumps(args)))
        reason = choices[0].get("finish_reason")
        c.finish = _FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"
    c.usage = usage_fields.from_chat(body.get("usage"))
    return c


def chat_request(body: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 tool_choice: Any, params: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A Chat Completions request translated from another API's ``body``: the converted
    ``messages`` and ``tools``, sampling ``params`` renamed (source key, chat key), and usage
    asked for on streams (the gateway meters it)."""
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if tools:
        chat["tools"] = tools
        if tool_choice is not None:
            chat["tool_choice"] = tool_choice
    for src, dst in params:
        if body.get(src) is not None:
            chat[dst] = body[src]
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat

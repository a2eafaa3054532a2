"""Calls the model through the gateway: Chat Completions or Anthropic Messages, not streaming.

Renders the neutral conversation in the wire API's shape, reads back one assistant message and
the usage the model reported, and turns refusals and failures into a :class:`ModelError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from agentmeter.agents.native.messages import Message, ToolCall
from agentmeter.agents.native.options import MESSAGES_DEFAULT_MAX_TOKENS
from agentmeter.agents.native.tools import ToolSpec
from agentmeter.gateway.usage import parse as parse_usage
from agentmeter.gateway.usage import to_record
from agentmeter.records import TokenUsage

WireApi = Literal["chat", "messages"]
PATHS: dict[WireApi, str] = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}
ANTHROPIC_VERSION = "2023-06-01"


class ModelError(Exception):
    """The model call failed. ``kind`` is ``budget_exceeded`` or ``model_error``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class ModelReply:
    message: Message
    usage: TokenUsage | None
    prompt_tokens: int | None  # the whole prompt, cached part included


def render(api: WireApi, model: str, system: str, messages: list[Message],
           tools: tuple[ToolSpec, ...], *, max_tokens: int | None,
           temperature: float | None) -> dict[str, Any]:
    """The request body for ``api``."""
    body: dict[str, Any]
    if api == "chat":
        body = {"model": model, "messages": [{"role": "system", "content": system},
                                             *(_chat_message(m) for m in messages)],
                "tools": [{"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}}
                    for t in tools]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    else:
        body = {"model": model, "system": system, "messages": _anthropic_messages(messages),
                "tools": [{"name": t.name, "description": t.description,
                           "input_schema": t.parameters} for t in tools],
                "max_tokens": max_tokens or MESSAGES_DEFAULT_MAX_TOKENS}
    if temperature is not None:
        body["temperature"] = temperature
    return body


def _chat_message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": c.raw_arguments if c.raw_arguments is not None
            else json.dumps(c.arguments, ensure_ascii=False)}}
            for c in m.tool_calls]
    return out


def _anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages alternate user/assistant: tool results and user text merge into user turns."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                       for c in m.tool_calls]
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "."}]})
            continue
        block = ({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
                 if m.role == "tool" else {"type": "text", "text": m.content})
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    return out


def _arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return {}, f"expected a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw or "{}")
    except ValueError as e:
        return {}, f"invalid JSON ({e})"
    if not isinstance(value, dict):
        return {}, "expected a JSON object"
    return value, None


def parse_reply(api: WireApi, obj: dict[str, Any]) -> ModelReply:
    """The assistant message and usage of a non-streaming response body."""
    calls: list[ToolCall] = []
    if api == "chat":
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ModelError("model_error", "model response has no choices")
        msg = choices[0].get("message")
        msg = msg if isinstance(msg, dict) else {}
        content = msg.get("content")
        text = content if isinstance(content, str) else ""
        for i, c in enumerate(msg.get("tool_calls") or []):
            if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
                continue
            fn = c["function"]
            args, problem = _arguments(fn.get("arguments"))
            raw = fn.get("arguments")
            calls.append(ToolCall(str(c.get("id") or f"call_{i}"), str(fn.get("name")), args,
                                  problem, raw if problem and isinstance(raw, str) else None))
    else:
        blocks = obj.get("content")
        if not isinstance(blocks, list):
            raise ModelError("model_error", "model response has no content")
        texts = []
        for i, b in enumerate(blocks):
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text" and isinstance(b.get("text"), str):
                texts.append(b["text"])
            elif b.get("type") == "tool_use":
                args, problem = _arguments(b.get("input"))
                calls.append(ToolCall(str(b.get("id") or f"toolu_{i}"), str(b.get("name")),
                                      args, problem))
        text = "\n".join(texts)
    usage = None
    if isinstance(obj.get("usage"), dict):
        usage = to_record(parse_usage(api, obj["usage"]))
    return ModelReply(Message("assistant", text, calls), usage,
                      usage.input if usage is not None else None)


def _error_text(body: bytes) -> tuple[str, str]:
    """(message, code-or-type) of an error body of either API."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:300].decode("utf-8", "replace"), ""
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)[:500], str(err.get("code") or err.get("type") or "")
    return str(obj)[:500], ""


class ModelClient:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str, model: str,
                 api: WireApi, *, max_tokens: int | None, temperature: float | None) -> None:
        self.session, self.token, self.model, self.api = session, token, model, api
        self.url = base_url.rstrip("/").removesuffix("/v1") + PATHS[api]
        self.max_tokens, self.temperature = max_tokens, temperature

    def body(self, system: str, messages: list[Message],
             tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
        return render(self.api, self.model, system, messages, tools,
                      max_tokens=self.max_tokens, temperature=self.temperature)

    async def complete(self, body: dict[str, Any]) -> ModelReply:
        if self.api == "chat":
            headers = {"Authorization": f"Bearer {self.token}"}
        else:
            headers = {"x-api-key": self.token, "anthropic-version": ANTHROPIC_VERSION}
        try:
            async with self.session.post(self.url, json=body, headers=headers) as r:
                raw = await r.read()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ModelError("model_error", f"model call failed: {type(e).__name__}: {e}") from e
        if status != 200:
            message, code = _error_text(raw)
            if status == 402 or (status == 429 and code == "insufficient_quota"):
                raise ModelError("budget_exceeded", message)
            raise ModelError("model_error", f"model call failed: HTTP {status}: {message}")
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ModelError("model_error", f"model response is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise ModelError("model_error", "model response is not a JSON object")
        return parse_reply(self.api, obj)

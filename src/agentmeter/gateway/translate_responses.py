"""OpenAI Responses requests → Chat Completions requests (for chat-only upstreams).

The way back (chat completion or chunk stream → Responses body or events) goes through the
neutral completion and ``wire_responses``.
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.gateway.wire_chat import chat_request


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for p in content if isinstance(content, list) else []:
        if isinstance(p, dict) and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif isinstance(p, str):
            parts.append(p)
    return "".join(parts)


def _content(content: Any) -> Any:
    """Responses content parts → chat content (a string, or parts when images are present)."""
    if not isinstance(content, list):
        return _text(content)
    if not any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
        return _text(content)
    parts: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        if p.get("type") == "input_image" and isinstance(p.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        elif isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
    return parts


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict) or t.get("type") != "function" or not t.get("name"):
            continue  # hosted tools (web_search, …) have no chat equivalent
        fn: dict[str, Any] = {"name": t["name"],
                              "parameters": t.get("parameters") or {"type": "object"}}
        if t.get("description"):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice if choice in ("auto", "none", "required") else None


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        kind = it.get("type", "message")
        if kind == "message":
            role = it.get("role", "user")
            role = "system" if role == "developer" else role
            if role not in ("system", "user", "assistant"):
                role = "user"
            messages.append({"role": role, "content": _content(it.get("content"))})
        elif kind == "function_call":
            call = {"id": it.get("call_id") or it.get("id"), "type": "function",
                    "function": {"name": it.get("name", ""),
                                 "arguments": it.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out = it.get("output")
            messages.append({"role": "tool", "tool_call_id": it.get("call_id"),
                             "content": out if isinstance(out, str) else
                             _text(out) or json.dumps(out)})
        # reasoning and hosted-tool items have no chat equivalent and are dropped
    chat = chat_request(body, messages, _tools(body.get("tools")), _tool_choice(body.get("tool_choice")),
                        (("temperature", "temperature"), ("top_p", "top_p"),
                         ("max_output_tokens", "max_tokens")))
    if "tools" in chat and isinstance(body.get("parallel_tool_calls"), bool):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    return chat

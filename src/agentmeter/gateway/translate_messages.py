"""Anthropic Messages requests → Chat Completions requests (for chat-only upstreams).

The way back goes through the neutral completion and ``wire_messages``.
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.gateway.wire_chat import chat_request


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    out: list[str] = []
    for b in content if isinstance(content, list) else []:
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
    return "\n".join(out)


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    src = block.get("source")
    if not isinstance(src, dict):
        return None
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif src.get("type") == "url":
        url = str(src.get("url"))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user(content: Any) -> list[dict[str, Any]]:
    """One Anthropic user turn → tool messages (first) and a user message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_msgs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in content if isinstance(content, list) else []:
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "tool_result":
            text = _block_text(b.get("content"))
            if b.get("is_error"):
                text = f"[tool error] {text}"
            tool_msgs.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                              "content": text})
        elif kind == "text" and isinstance(b.get("text"), str):
            parts.append({"type": "text", "text": b["text"]})
        elif kind == "image":
            image = _image(b)
            if image is not None:
                parts.append(image)
    out = list(tool_msgs)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        merged: Any = "\n".join(p["text"] for p in parts) if only_text else parts
        out.append({"role": "user", "content": merged})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for b in content if isinstance(content, list) else []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
        elif b.get("type") == "tool_use":
            calls.append({"id": b.get("id"), "type": "function",
                          "function": {"name": b.get("name", ""),
                                       "arguments": json.dumps(b.get("input") or {})}})
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict) or not t.get("name") or "input_schema" not in t:
            continue  # server tools have no chat equivalent
        fn: dict[str, Any] = {"name": t["name"], "parameters": t["input_schema"] or {}}
        if t.get("description"):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = _block_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    for m in raw if isinstance(raw, list) else []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            messages.append(_assistant(m.get("content")))
        else:
            messages.extend(_user(m.get("content")))
    return chat_request(body, messages, _tools(body.get("tools")), _tool_choice(body.get("tool_choice")),
                        (("temperature", "temperature"), ("top_p", "top_p"),
                         ("max_tokens", "max_tokens"), ("stop_sequences", "stop")))

"""Read what the scripted model needs from a request of any wire API.

Everything the scripted model decides is derived from the request itself (tools offered, tool
results already in the conversation), never from server memory, so replays are deterministic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentmeter.gateway.wire_gemini import field as gfield
from agentmeter.gateway.wire_gemini import parts_of
from agentmeter.records import WireApi

MINI_SWE_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass
class OfferedTool:
    name: str
    schema: dict[str, Any]


@dataclass
class Conversation:
    """What the scripted model reads from a request. With tools offered, ``tool_results`` and
    ``assistant_turns`` count from the newest prompt (a user message that is not a tool result),
    so a conversation continued with a new prompt (a scenario's next step, feedback) starts
    the policy over; text protocols, whose observations are user messages, count them all."""

    tools: list[OfferedTool] = field(default_factory=list)
    tool_results: int = 0
    assistant_turns: int = 0
    submit_protocol: bool = False  # mini-swe-agent style: must run `echo COMPLETE_…` to finish
    prompt_text: str = ""  # canonical text of the whole prompt (for token counts)
    tail_text: str = ""  # canonical text of the newest message
    last_user_text: str = ""  # the text parts of the last user message (what a judge reads)
    prompt_user_text: str = ""  # the text of the newest prompt (tool protocols; else the first)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _gemini_tools(raw: Any) -> list[OfferedTool]:
    out: list[OfferedTool] = []
    for t in _list(raw):
        decls = gfield(t, "functionDeclarations")
        for d in _list(decls):
            schema = gfield(d, "parametersJsonSchema") or gfield(d, "parameters")
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                out.append(OfferedTool(d["name"], schema if isinstance(schema, dict) else {}))
    return out


def _tools(api: WireApi, raw: Any) -> list[OfferedTool]:
    if api == "gemini":
        return _gemini_tools(raw)
    out: list[OfferedTool] = []
    for t in _list(raw):
        if not isinstance(t, dict):
            continue
        if api == "chat":
            fn = t.get("function") if isinstance(t.get("function"), dict) else None
            name, schema = (fn.get("name"), fn.get("parameters")) if fn else (None, None)
        elif api == "responses":
            name, schema = t.get("name"), t.get("parameters")
            if t.get("type") not in (None, "function"):
                continue
        else:
            name, schema = t.get("name"), t.get("input_schema")
            if t.get("type") not in (None, "custom"):
                continue
        if isinstance(name, str):
            out.append(OfferedTool(name, schema if isinstance(schema, dict) else {}))
    return out


def _text(content: Any) -> str:
    """The text of a message's content: a string, or its parts' ``text`` fields in order."""
    if isinstance(content, str):
        return content
    return "".join(p["text"] for p in _list(content)
                   if isinstance(p, dict) and isinstance(p.get("text"), str))


def _last_user_text(items: list[Any]) -> str:
    for m in reversed(items):
        if isinstance(m, dict) and m.get("role") == "user":
            return _text(m.get("content"))
    return ""


def _new_prompt(conv: Conversation, text: str) -> None:
    if conv.tools:
        conv.tool_results = conv.assistant_turns = 0
        conv.prompt_user_text = text
    elif not conv.prompt_user_text:
        conv.prompt_user_text = text


def _read_gemini(conv: Conversation, body: dict[str, Any]) -> tuple[Any, list[Any]]:
    """Gemini ``contents``: ``model`` turns, ``user`` turns of text or of function responses."""
    items = _list(body.get("contents"))
    for c in items:
        if not isinstance(c, dict):
            continue
        if c.get("role") == "model":
            conv.assistant_turns += 1
            continue
        parts = parts_of(c)
        results = sum(1 for p in parts if gfield(p, "functionResponse") is not None)
        text = "".join(p["text"] for p in parts if isinstance(p.get("text"), str))
        if results:
            conv.tool_results += results
        else:
            _new_prompt(conv, text)
        conv.last_user_text = text
    return [gfield(body, "systemInstruction")], items


def read(api: WireApi, body: dict[str, Any]) -> Conversation:
    conv = Conversation(tools=_tools(api, body.get("tools")))
    head: Any
    items: list[Any]
    if api == "gemini":
        head, items = _read_gemini(conv, body)
    elif api == "responses":
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else _list(raw)
        head = [body.get("instructions")]
        for it in items:
            if not isinstance(it, dict):
                continue
            kind = it.get("type")
            if isinstance(kind, str) and kind.endswith("_call_output"):
                conv.tool_results += 1
            elif it.get("role") == "assistant":
                conv.assistant_turns += 1
            elif it.get("role") == "user":
                _new_prompt(conv, _text(it.get("content")))
    else:
        items = _list(body.get("messages"))
        head = [body.get("system")] if api == "messages" else []
        for m in items:
            if not isinstance(m, dict):
                continue
            role = m.get("role")
            if role == "assistant":
                conv.assistant_turns += 1
            elif role == "tool":
                conv.tool_results += 1
            elif role == "user":
                results = sum(1 for b in _list(m.get("content"))
                              if isinstance(b, dict) and b.get("type") == "tool_result")
                if results:
                    conv.tool_results += results
                else:
                    _new_prompt(conv, _text(m.get("content")))
    conv.prompt_text = _dump([head, body.get("tools"), items])
    conv.tail_text = _dump(items[-1]) if items else ""
    if api != "gemini":
        conv.last_user_text = _last_user_text(items)
    conv.submit_protocol = MINI_SWE_SUBMIT in conv.prompt_text
    return conv

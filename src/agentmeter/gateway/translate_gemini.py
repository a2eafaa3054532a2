"""Gemini requests ↔ Chat Completions requests (chat is the hub of translation).

``to_chat``: a Gemini client's request for a chat-speaking upstream. ``from_chat``: a chat request
(a chat client's, or one translated from Responses or Messages) for a Gemini-speaking upstream.
Replies come back through the neutral completion and the client's wire writer.

Gemini's function call ids are optional: calls without one get ``call_<n>`` (n counts the
conversation's calls) and a function response without a matching id is matched to the earliest
unanswered call of its name (else the earliest unanswered call).
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.gateway.wire_chat import chat_request
from agentmeter.gateway.wire_gemini import args_object, field, parts_of

#: Google's documented placeholder for function calls whose thought signature is unknown
#: (conversations built by another model or API): the model skips validating it
SKIP_SIGNATURE = "skip_thought_signature_validator"


class UnsupportedGemini(ValueError):
    """A Gemini request feature with no Chat Completions equivalent (the message of a 400)."""


# -- Gemini → Chat -------------------------------------------------------------------------------

def _schema(value: Any) -> Any:
    """Gemini's OpenAPI-style schema (``"type": "OBJECT"``) → JSON Schema (lower-case types)."""
    if isinstance(value, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _schema(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_schema(v) for v in value]
    return value


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict):
            continue
        for key in t:
            if key not in ("functionDeclarations", "function_declarations"):
                raise UnsupportedGemini(f"tool type {key!r} has no equivalent in the upstream's "
                                        "API (only functionDeclarations are translated)")
        for d in field(t, "functionDeclarations") or []:
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                continue
            params = field(d, "parametersJsonSchema")
            if params is None:
                params = _schema(d.get("parameters"))
            fn: dict[str, Any] = {"name": d["name"],
                                  "parameters": params or {"type": "object", "properties": {}}}
            if d.get("description"):
                fn["description"] = d["description"]
            out.append({"type": "function", "function": fn})
    return out


def _tool_choice(config: Any) -> Any:
    fcc = field(config, "functionCallingConfig")
    mode = str(field(fcc, "mode") or "").upper()
    names = field(fcc, "allowedFunctionNames")
    if mode == "ANY":
        if isinstance(names, list) and len(names) == 1:
            return {"type": "function", "function": {"name": names[0]}}
        return "required"
    return {"AUTO": "auto", "VALIDATED": "auto", "NONE": "none"}.get(mode)


def _user_part(part: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(part.get("text"), str):
        return None if part.get("thought") is True else {"type": "text", "text": part["text"]}
    inline = field(part, "inlineData")
    if isinstance(inline, dict):
        mime = str(field(inline, "mimeType") or "")
        if not mime.startswith("image/"):
            raise UnsupportedGemini(f"inlineData of type {mime!r} has no equivalent in the "
                                    "upstream's API (only images are translated)")
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,"
                                                          f"{inline.get('data', '')}"}}
    for key in ("fileData", "executableCode", "codeExecutionResult"):
        if field(part, key) is not None:
            raise UnsupportedGemini(f"part {key!r} has no equivalent in the upstream's API")
    return None


def _response_text(response: Any) -> str:
    if isinstance(response, dict) and set(response) == {"output"} and isinstance(
            response["output"], str):
        return str(response["output"])
    return json.dumps(response)


class _Calls:
    """Function calls of the conversation so far, and which were answered."""

    def __init__(self) -> None:
        self.count = 0
        self.open: list[tuple[str, str]] = []  # (id, name), unanswered, oldest first

    def new(self, fc: dict[str, Any]) -> dict[str, Any]:
        call_id = str(fc.get("id") or f"call_{self.count}")
        self.count += 1
        name = str(fc.get("name") or "")
        self.open.append((call_id, name))
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(fc.get("args") or {})}}

    def answer(self, fr: dict[str, Any]) -> str:
        rid, name = fr.get("id"), fr.get("name")
        for match in (lambda c: c[0] == rid, lambda c: c[1] == name, lambda c: True):
            for i, c in enumerate(self.open):
                if match(c):
                    return self.open.pop(i)[0]
        call_id = str(rid or f"call_{self.count}")
        self.count += 1
        return call_id


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = "\n".join(p["text"] for p in parts_of(field(body, "systemInstruction"))
                       if isinstance(p.get("text"), str))
    if system:
        messages.append({"role": "system", "content": system})
    calls = _Calls()
    contents = body.get("contents")
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict):
            continue
        parts = parts_of(content)
        if content.get("role") == "model":
            texts = [p["text"] for p in parts if isinstance(p.get("text"), str)
                     and p.get("thought") is not True]
            tool_calls = [calls.new(fc) for p in parts
                          if isinstance(fc := field(p, "functionCall"), dict)]
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
            if tool_calls:
                msg["tool_calls"] = tool_calls
            messages.append(msg)
            continue
        user: list[dict[str, Any]] = []
        for p in parts:
            fr = field(p, "functionResponse")
            if isinstance(fr, dict):
                messages.append({"role": "tool", "tool_call_id": calls.answer(fr),
                                 "content": _response_text(fr.get("response"))})
            elif (converted := _user_part(p)) is not None:
                user.append(converted)
        if user:
            only_text = all(u["type"] == "text" for u in user)
            messages.append({"role": "user", "content": "\n".join(u["text"] for u in user)
                             if only_text else user})
    return messages


def to_chat(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """A Gemini request → a Chat request (raises ``UnsupportedGemini``)."""
    gen = field(body, "generationConfig")
    flat: dict[str, Any] = dict(gen) if isinstance(gen, dict) else {}
    flat["stream"] = stream
    chat = chat_request(flat, _messages(body), _tools(body.get("tools")),
                        _tool_choice(field(body, "toolConfig")),
                        (("temperature", "temperature"), ("topP", "top_p"), ("top_p", "top_p"),
                         ("maxOutputTokens", "max_tokens"), ("max_output_tokens", "max_tokens"),
                         ("stopSequences", "stop"), ("stop_sequences", "stop"), ("seed", "seed"),
                         ("presencePenalty", "presence_penalty"),
                         ("frequencyPenalty", "frequency_penalty")))
    schema = field(flat, "responseJsonSchema") or field(flat, "responseSchema")
    if isinstance(schema, dict):
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "schema": _schema(schema)}}
    elif field(flat, "responseMimeType") == "application/json":
        chat["response_format"] = {"type": "json_object"}
    return chat


# -- Chat → Gemini -------------------------------------------------------------------------------

def _gemini_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    out: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append({"text": p["text"]})
        elif p.get("type") == "image_url":
            img = p.get("image_url")
            url = str(img.get("url") if isinstance(img, dict) else img or "")
            head, sep, data = url.partition(";base64,")
            if url.startswith("data:") and sep:
                out.append({"inlineData": {"mimeType": head[5:], "data": data}})
            elif url:
                ext = url.rsplit(".", 1)[-1].lower()
                mime = f"image/{'jpeg' if ext == 'jpg' else ext}" if ext in (
                    "png", "jpg", "jpeg", "gif", "webp") else "image/png"
                out.append({"fileData": {"mimeType": mime, "fileUri": url}})
    return out


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _generation_config(chat: dict[str, Any]) -> dict[str, Any]:
    gen: dict[str, Any] = {}
    for src, dst in (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed"),
                     ("max_completion_tokens", "maxOutputTokens"), ("max_tokens", "maxOutputTokens"),
                     ("presence_penalty", "presencePenalty"),
                     ("frequency_penalty", "frequencyPenalty")):
        if chat.get(src) is not None and dst not in gen:
            gen[dst] = chat[src]
    stop = chat.get("stop")
    if stop:
        gen["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    fmt = chat.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        gen["responseMimeType"] = "application/json"
        js = fmt.get("json_schema")
        if isinstance(js, dict) and isinstance(js.get("schema"), dict):
            gen["responseJsonSchema"] = js["schema"]
    return gen


def from_chat(chat: dict[str, Any]) -> dict[str, Any]:
    """A Chat request → a Gemini request body (the model and stream go in the URL)."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id → function name
    raw = chat.get("messages")
    for m in raw if isinstance(raw, list) else []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system += [p["text"] for p in _gemini_parts(m.get("content")) if "text" in p]
        elif role == "assistant":
            parts = _gemini_parts(m.get("content"))
            for i, call in enumerate(m.get("tool_calls") or []):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict):
                    continue
                names[str(call.get("id"))] = str(fn.get("name") or "")
                args = fn.get("arguments")
                part: dict[str, Any] = {"functionCall": {
                    "id": str(call.get("id")), "name": str(fn.get("name") or ""),
                    "args": args_object(args) if isinstance(args, str) else args or {}}}
                if i == 0:
                    part["thoughtSignature"] = SKIP_SIGNATURE
                parts.append(part)
            _add(contents, "model", parts)
        elif role == "tool":
            call_id = str(m.get("tool_call_id"))
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                p["text"] for p in _gemini_parts(content) if "text" in p)
            _add(contents, "user", [{"functionResponse": {
                "id": call_id, "name": names.get(call_id, ""), "response": {"output": text}}}])
        else:
            _add(contents, "user", _gemini_parts(m.get("content")))
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n".join(system)}]}
    decls = []
    for t in chat.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        if isinstance(fn, dict) and fn.get("name"):
            decl = {"name": fn["name"], "parametersJsonSchema": fn.get("parameters") or {
                "type": "object", "properties": {}}}
            if fn.get("description"):
                decl["description"] = fn["description"]
            decls.append(decl)
    if decls:
        body["tools"] = [{"functionDeclarations": decls}]
        choice = chat.get("tool_choice")
        mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}.get(str(choice))
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            body["toolConfig"] = {"functionCallingConfig": {
                "mode": "ANY", "allowedFunctionNames": [choice["function"].get("name")]}}
        elif mode is not None:
            body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    gen = _generation_config(chat)
    if gen:
        body["generationConfig"] = gen
    return body

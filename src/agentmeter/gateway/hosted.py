"""Provider-hosted features in a client's request: what the provider runs for the agent.

A provider's web search or fetch, code execution, remote MCP servers, file search or image
generation are charged per use (not in tokens, so not metered against the budgets) and reach the
internet for a task whose sandbox may have none; ``previous_response_id``, ``conversation`` and
``prompt`` make the provider add stored input that a tiny request does not show (its worst case
is unknown before it is served); ``background`` runs a response the gateway never sees end.
Unless the trial allows them (a task with the full internet, ``allow_internet``): a provider-run
entry of ``tools`` is dropped from the request (the call goes on without it, as a CLI that
lists such a tool among its own, e.g. Codex's ``web_search``, keeps working); a request field
that asks for such a feature refuses the request (a 400 the agent sees, recorded as a refusal).
The lists below are the known ones per API (docs/security.md); a client-side tool (a function,
Codex's ``local_shell``, Anthropic's ``bash``/``text_editor``/``computer``) is never touched.
"""

from __future__ import annotations

from typing import Any

from agentmeter.records import WireApi

#: request fields that ask the provider to act or to add input, per client API
HOSTED_FIELDS: dict[WireApi, tuple[str, ...]] = {
    "chat": ("web_search_options", "plugins", "search_parameters"),
    "responses": ("previous_response_id", "conversation", "prompt", "background"),
    "messages": ("mcp_servers", "container"),
    "gemini": ("cachedContent", "cached_content"),
}
#: tool ``type`` prefixes of provider-run tools (chat, responses, messages)
HOSTED_TOOL_TYPES = ("web_search", "web_fetch", "file_search", "code_interpreter",
                     "code_execution", "image_generation", "mcp")
#: the keys of a Gemini tool the client runs itself (any other key is a provider-run tool:
#: googleSearch, urlContext, codeExecution, retrieval, fileSearch, googleMaps, ...)
GEMINI_CLIENT_TOOLS = frozenset({"functionDeclarations", "function_declarations",
                                 "computerUse", "computer_use"})


def hosted_field(api: WireApi, body: dict[str, Any]) -> str | None:
    """The request field that asks for a provider-hosted feature, or ``None``."""
    for name in HOSTED_FIELDS[api]:
        if body.get(name) not in (None, False):
            return name
    return None


def _hosted_tool(api: WireApi, tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    if api == "gemini":
        hosted = sorted(k for k in tool if k not in GEMINI_CLIENT_TOOLS)
        return hosted[0] if hosted else None
    kind = tool.get("type")
    return kind if isinstance(kind, str) and kind.startswith(HOSTED_TOOL_TYPES) else None


def without_hosted_tools(api: WireApi, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The request without its provider-run tools, and what was dropped (the same body when
    nothing was). A Gemini tool entry keeps its function declarations; with no tool left,
    ``tools`` and ``tool_choice``/``toolConfig`` go too."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return body, []
    kept: list[Any] = []
    dropped: list[str] = []
    for tool in tools:
        kind = _hosted_tool(api, tool)
        if kind is None:
            kept.append(tool)
            continue
        dropped.append(kind)
        if api == "gemini":
            rest = {k: v for k, v in tool.items() if k in GEMINI_CLIENT_TOOLS}
            if rest:
                kept.append(rest)
    if not dropped:
        return body, []
    out = dict(body)
    if kept:
        out["tools"] = kept
    else:
        for name in ("tools", "tool_choice", "toolConfig", "tool_config"):
            out.pop(name, None)
    return out, dropped


def _remote(part: dict[str, Any]) -> str | None:
    """What a content part makes the provider fetch or add (a URL, a stored file), or None."""
    kind = part.get("type")
    url: Any = None
    if kind == "image_url":  # chat
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
    elif kind == "input_image" or kind == "input_file":  # responses
        if part.get("file_id") is not None:
            return f"{kind}.file_id"
        url = part.get("image_url") if kind == "input_image" else part.get("file_url")
    elif kind == "file":  # chat: a stored file
        file = part.get("file")
        if isinstance(file, dict) and file.get("file_id") is not None:
            return "file.file_id"
    elif kind in ("image", "document"):  # messages
        source = part.get("source")
        if isinstance(source, dict) and source.get("type") in ("url", "file"):
            return f"{kind}.source.{source['type']}"
    data = part.get("fileData", part.get("file_data"))  # gemini: a File API or YouTube URI
    if isinstance(data, dict) and (data.get("fileUri") or data.get("file_uri")):
        return "fileData.fileUri"
    if isinstance(url, str) and not url.startswith("data:"):
        return f"{kind}.url"
    return None


def remote_input(body: dict[str, Any]) -> str | None:
    """The first content part (any API's shape, at any depth) that makes the provider fetch a
    URL or add a stored file, or ``None``. Such input reaches the internet from the provider
    (an agent without internet sends ``https://attacker/?secret``) and costs tokens its bytes
    do not bound (a YouTube ``fileUri`` is ~1M input tokens in 60 bytes); ``data:`` URLs and
    inline bytes are the request's own."""
    stack: list[Any] = [body]
    pop, push = stack.pop, stack.append
    while stack:  # every request walks this: plain loops, ``_remote`` only where it can find
        node = pop()  # something (a part with a type, or Gemini's file data)
        if isinstance(node, dict):
            if "type" in node or "fileData" in node or "file_data" in node:
                found = _remote(node)
                if found is not None:
                    return found
            for v in node.values():
                if isinstance(v, _NESTED):
                    push(v)
        elif isinstance(node, list):
            for v in node:
                if isinstance(v, _NESTED):
                    push(v)
    return None


_NESTED = (dict, list)


def budget_refusal(field: str) -> str:
    return (f"agentmeter refused the request: its field {field!r} names input the provider "
            "fetches (a URL or a stored file), whose tokens the request's size does not bound; "
            "this trial has a token or USD budget, which such input could overrun")


def refusal(field: str) -> str:
    return (f"agentmeter refused the request: its field {field!r} asks the provider for a "
            "hosted feature (stored input or files, a URL the provider fetches, a background "
            "run, or a provider-run search, fetch, code execution or MCP server), which is not "
            "metered and reaches the internet; "
            "this task's network does not allow it (only a task with the full internet does)")

"""Usage in each wire API's own fields, both ways: parse what an upstream reported, render it.

Parsing keeps exactly what was reported: a field the upstream did not send stays ``None``.
``input`` always includes cached input (Anthropic's ``input_tokens`` excludes it, so it is added);
``output`` always includes reasoning (Gemini's ``candidatesTokenCount`` excludes its
``thoughtsTokenCount``, so they are added, as OpenAI's ``completion_tokens`` include reasoning).
"""

from __future__ import annotations

from typing import Any

from agentmeter.gateway.neutral import NeutralUsage
from agentmeter.records import TokenUsage, WireApi


def _int(d: Any, key: str) -> int | None:
    if not isinstance(d, dict):
        return None
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def from_chat(u: Any) -> NeutralUsage:
    ptd = u.get("prompt_tokens_details") if isinstance(u, dict) else None
    ctd = u.get("completion_tokens_details") if isinstance(u, dict) else None
    cache_read = _int(ptd, "cached_tokens")
    if cache_read is None:
        cache_read = _int(u, "prompt_cache_hit_tokens")  # DeepSeek
    cache_creation = None
    for key in ("cache_write_tokens", "cache_creation_tokens", "cache_creation_input_tokens"):
        cache_creation = _int(ptd, key) if cache_creation is None else cache_creation
    return NeutralUsage(
        input=_int(u, "prompt_tokens"),
        output=_int(u, "completion_tokens"),
        cache_read=cache_read,
        cache_creation=cache_creation,
        reasoning=_int(ctd, "reasoning_tokens"),
    )


def from_responses(u: Any) -> NeutralUsage:
    itd = u.get("input_tokens_details") if isinstance(u, dict) else None
    otd = u.get("output_tokens_details") if isinstance(u, dict) else None
    return NeutralUsage(
        input=_int(u, "input_tokens"),
        output=_int(u, "output_tokens"),
        cache_read=_int(itd, "cached_tokens"),
        cache_creation=None,
        reasoning=_int(otd, "reasoning_tokens"),
    )


def from_messages(u: Any) -> NeutralUsage:
    uncached = _int(u, "input_tokens")
    creation = _int(u, "cache_creation_input_tokens")
    read = _int(u, "cache_read_input_tokens")
    total = None if uncached is None else uncached + (creation or 0) + (read or 0)
    return NeutralUsage(
        input=total, output=_int(u, "output_tokens"), cache_read=read, cache_creation=creation
    )


def from_gemini(u: Any) -> NeutralUsage:
    """Gemini's ``usageMetadata``. Its JSON omits counts that are zero (proto3), so a missing
    candidates or thoughts count next to a reported one is zero; with neither reported the output
    is what ``totalTokenCount`` leaves after the prompt, or ``None``."""
    prompt, tool_prompt = _int(u, "promptTokenCount"), _int(u, "toolUsePromptTokenCount")
    candidates, thoughts = _int(u, "candidatesTokenCount"), _int(u, "thoughtsTokenCount")
    total = _int(u, "totalTokenCount")
    source = None if prompt is None and tool_prompt is None else (prompt or 0) + (tool_prompt or 0)
    if candidates is not None or thoughts is not None:
        output: int | None = (candidates or 0) + (thoughts or 0)
    else:
        output = max(total - source, 0) if total is not None and source is not None else None
    return NeutralUsage(input=source, output=output,
                        cache_read=_int(u, "cachedContentTokenCount"), reasoning=thoughts)


def parse(api: WireApi, u: Any) -> NeutralUsage:
    if api == "chat":
        return from_chat(u)
    if api == "responses":
        return from_responses(u)
    if api == "gemini":
        return from_gemini(u)
    return from_messages(u)


def to_record(u: NeutralUsage) -> TokenUsage:
    return TokenUsage(
        input=u.input,
        output=u.output,
        cache_creation=u.cache_creation,
        cache_read=u.cache_read,
        reasoning=u.reasoning,
    )


def to_chat(u: NeutralUsage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": u.input or 0,
        "completion_tokens": u.output or 0,
        "total_tokens": (u.input or 0) + (u.output or 0),
    }
    if u.cache_read is not None or u.cache_creation is not None:
        ptd: dict[str, int] = {"cached_tokens": u.cache_read or 0}
        if u.cache_creation is not None:
            ptd["cache_write_tokens"] = u.cache_creation
        out["prompt_tokens_details"] = ptd
    if u.reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": u.reasoning}
    return out


def to_responses(u: NeutralUsage) -> dict[str, Any]:
    return {
        "input_tokens": u.input or 0,
        "input_tokens_details": {"cached_tokens": u.cache_read or 0},
        "output_tokens": u.output or 0,
        "output_tokens_details": {"reasoning_tokens": u.reasoning or 0},
        "total_tokens": (u.input or 0) + (u.output or 0),
    }


def to_messages(u: NeutralUsage) -> dict[str, Any]:
    return {
        "input_tokens": u.uncached_input,
        "cache_creation_input_tokens": u.cache_creation or 0,
        "cache_read_input_tokens": u.cache_read or 0,
        "output_tokens": u.output or 0,
    }


def to_gemini(u: NeutralUsage) -> dict[str, Any]:
    """Gemini's ``usageMetadata``: the four counts and their total (candidates exclude thoughts)."""
    thoughts = u.reasoning or 0
    return {
        "promptTokenCount": u.input or 0,
        "candidatesTokenCount": max((u.output or 0) - thoughts, 0),
        "cachedContentTokenCount": u.cache_read or 0,
        "thoughtsTokenCount": thoughts,
        "totalTokenCount": (u.input or 0) + (u.output or 0),
    }

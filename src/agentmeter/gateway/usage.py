"""Usage in each wire API's own fields, both ways: parse what an upstream reported, render it.

Parsing keeps exactly what was reported: a field the upstream did not send stays ``None``.
``input`` always includes cached input (Anthropic's ``input_tokens`` excludes it, so it is added).
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


def parse(api: WireApi, u: Any) -> NeutralUsage:
    if api == "chat":
        return from_chat(u)
    if api == "responses":
        return from_responses(u)
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

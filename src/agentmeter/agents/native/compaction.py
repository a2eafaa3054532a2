"""Context compaction: keep the prompt under a share of the model's window.

Prompt size is estimated as characters / 4 of the request body, scaled by what the model last
reported (its ``prompt_tokens`` over our estimate of that same request). When over the limit,
compaction runs in steps, checking after each, from gentle to drastic:

1. old tool outputs (and long arguments) become short placeholders, the newest turns kept whole;
2. old turns are dropped and summarised mechanically (what was called, how it ended) in one
   message right after the instruction;
3. both again with fewer recent turns kept, down to the last one;
4. the newest turn's tool outputs are cut to their head and tail.

The instruction (first message) and the system prompt (rebuilt every turn) are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentmeter.agents.native.messages import Message, ToolCall, truncate

SUMMARY_HEADER = "[Summary of earlier turns, dropped to save context]"
_ELIDED = "[output of {name} elided to save context: {n} characters]"
_LONG_ARGUMENT = 400
_LAST_RESORT_CHARS = 1000


def estimate_tokens(body: dict[str, Any]) -> int:
    return (len(json.dumps(body, ensure_ascii=False)) + 3) // 4


class ContextMeter:
    """Decides when the prompt is too large, calibrated by the usage the model reports."""

    def __init__(self, context_window: int, compact_at: float) -> None:
        self.limit = int(context_window * compact_at)
        self.ratio = 1.0  # reported prompt tokens per estimated token

    def observe(self, estimated: int, reported: int | None) -> None:
        if reported and estimated > 0:
            self.ratio = max(1.0, reported / estimated)

    def tokens(self, body: dict[str, Any]) -> int:
        return int(estimate_tokens(body) * self.ratio)

    def over(self, body: dict[str, Any]) -> bool:
        return self.tokens(body) > self.limit


def _turn_starts(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role == "assistant"]


def _elide_call(call: ToolCall) -> ToolCall:
    args = {k: (f"[{len(v)} characters elided]" if isinstance(v, str) and len(v) > _LONG_ARGUMENT
                else v) for k, v in call.arguments.items()}
    return replace(call, arguments=args)


def elide_old_outputs(messages: list[Message], keep_recent: int) -> tuple[list[Message], int]:
    """Placeholders for tool outputs and long arguments before the last ``keep_recent`` turns."""
    starts = _turn_starts(messages)
    if len(starts) <= keep_recent:
        return messages, 0
    cut = starts[-keep_recent]
    out, elided = [], 0
    for i, m in enumerate(messages):
        if i < cut and m.role == "tool" and not m.content.startswith("[output of"):
            placeholder = _ELIDED.format(name=m.name, n=len(m.content))
            if len(placeholder) < len(m.content):
                m, elided = replace(m, content=placeholder), elided + 1
        elif i < cut and m.role == "assistant" and m.tool_calls:
            m = replace(m, tool_calls=[_elide_call(c) for c in m.tool_calls])
        out.append(m)
    return out, elided


def _describe(call: ToolCall) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:80]}"
                     for k, v in call.arguments.items())
    return f"{call.name}({args})"


def drop_old_turns(messages: list[Message], keep_recent: int,
                   summary_chars: int) -> tuple[list[Message], int]:
    """Drop turns before the last ``keep_recent``; summarise them after the instruction."""
    starts = _turn_starts(messages)
    if len(starts) <= keep_recent:
        return messages, 0
    head_end = starts[0]  # instruction, and an earlier summary if any
    cut = starts[-keep_recent]
    lines: list[str] = []
    results = {m.tool_call_id: m.content for m in messages[head_end:cut] if m.role == "tool"}
    for m in messages[head_end:cut]:
        if m.role == "assistant":
            if m.content.strip():
                lines.append("- said: " + " ".join(m.content.split())[:200])
            for c in m.tool_calls:
                out = (results.get(c.id) or "").strip().splitlines()
                last = out[-1][:120] if out else "(no output)"
                lines.append(f"- called {_describe(c)} -> {last}")
        elif m.role == "user":
            lines.append("- user: " + " ".join(m.content.split())[:200])
    head = [m for m in messages[:head_end] if not m.content.startswith(SUMMARY_HEADER)]
    earlier = [m.content.removeprefix(SUMMARY_HEADER).strip() for m in messages[:head_end]
               if m.content.startswith(SUMMARY_HEADER)]
    summary = truncate("\n".join([*earlier, *lines]), summary_chars)
    dropped = len(starts) - keep_recent
    return [*head, Message("user", f"{SUMMARY_HEADER}\n{summary}"), *messages[cut:]], dropped


def compact(messages: list[Message], keep_recent: int, over: Callable[[list[Message]], bool],
            summary_chars: int) -> tuple[list[Message], list[str]]:
    """Compact until ``over`` says the conversation fits (or nothing more can be done)."""
    notes: list[str] = []
    for keep in range(keep_recent, 0, -1):
        messages, n = elide_old_outputs(messages, keep)
        if n:
            notes.append(f"elided {n} tool outputs before the last {keep} turns")
        if not over(messages):
            return messages, notes
        messages, n = drop_old_turns(messages, keep, summary_chars)
        if n:
            notes.append(f"dropped {n} turns into a summary, keeping the last {keep}")
        if not over(messages):
            return messages, notes
    last = _turn_starts(messages)[-1:] or [len(messages)]
    messages = [replace(m, content=truncate(m.content, _LAST_RESORT_CHARS))
                if i > last[0] and m.role == "tool" else m for i, m in enumerate(messages)]
    notes.append(f"cut the newest tool outputs to {_LAST_RESORT_CHARS} characters")
    if over(messages):
        notes.append("still over the limit after compaction")
    return messages, notes

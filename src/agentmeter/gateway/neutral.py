"""An API-neutral model turn: what the scripted model produces and what translation carries.

A completion is text and/or tool calls plus usage. Streams are sequences of neutral events
(text delta, tool call start, tool argument delta, finish, usage) that each wire writer renders in
its own API's event sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


@dataclass
class NeutralUsage:
    """Usage in neutral terms. ``input`` includes cached input; ``None`` = not reported."""

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None

    @property
    def uncached_input(self) -> int:
        """Input tokens that were neither read from nor written to the cache."""
        return max((self.input or 0) - (self.cache_read or 0) - (self.cache_creation or 0), 0)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass
class Completion:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish: FinishReason = "stop"
    usage: NeutralUsage = field(default_factory=NeutralUsage)


@dataclass
class TextDelta:
    text: str


@dataclass
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass
class ToolArgsDelta:
    index: int
    delta: str


@dataclass
class Finish:
    reason: FinishReason


@dataclass
class UsageReport:
    usage: NeutralUsage


NeutralEvent = TextDelta | ToolCallStart | ToolArgsDelta | Finish | UsageReport


def completion_events(c: Completion, piece: int = 24) -> list[NeutralEvent]:
    """Split a completion into stream events (text and arguments in pieces of ``piece`` chars)."""
    events: list[NeutralEvent] = []
    for i in range(0, len(c.text), piece):
        events.append(TextDelta(c.text[i : i + piece]))
    for index, call in enumerate(c.tool_calls):
        events.append(ToolCallStart(index, call.id, call.name))
        for i in range(0, len(call.arguments), piece * 4):
            events.append(ToolArgsDelta(index, call.arguments[i : i + piece * 4]))
    events.append(Finish(c.finish))
    events.append(UsageReport(c.usage))
    return events

"""The native agent's conversation, independent of the wire API it is sent over.

A conversation is the task instruction followed by *turns*: one assistant message and the tool
results answering its tool calls. The system prompt is not part of it (it is rebuilt every turn).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant", "tool"]

TRUNCATION_MARKER = "\n[... {omitted} characters omitted ...]\n"


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    #: why ``arguments`` could not be read from the model's JSON text (returned to the model)
    parse_error: str | None = None
    #: the model's own arguments text when it was not a JSON object (sent back as it was, so
    #: the model sees what it sent)
    raw_arguments: str | None = None


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # for role "tool"
    name: str | None = None  # the tool's name, for role "tool"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], "")} | {
            "role": self.role}


def truncate(text: str, limit: int) -> str:
    """``text`` if short enough, else its head and tail around a marker saying what was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(TRUNCATION_MARKER) - 10, 0)
    head = keep // 2
    tail = keep - head
    omitted = len(text) - head - tail
    return text[:head] + TRUNCATION_MARKER.format(omitted=omitted) + text[len(text) - tail:]

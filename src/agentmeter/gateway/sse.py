"""Server-sent events: an incremental parser for byte chunks and an encoder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentmeter.gateway import jsonwire
from agentmeter.jsonshape import structural_tokens


@dataclass
class SseEvent:
    event: str | None
    data: str
    raw: bytes  # the event's exact bytes including the blank line that ended it


class SseParser:
    """Feed byte chunks as they arrive; get complete events back. Never raises on garbage."""

    def __init__(self, max_buffer: int = 16 * 1024 * 1024) -> None:
        self._buf = b""
        self._max = max_buffer

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buf += chunk
        if b"\r" in self._buf:
            self._buf = self._buf.replace(b"\r\n", b"\n")
        events: list[SseEvent] = []
        while True:
            end = self._buf.find(b"\n\n")
            if end < 0:
                break
            block, self._buf = self._buf[: end + 2], self._buf[end + 2 :]
            ev = _parse_block(block)
            if ev is not None:
                events.append(ev)
        if len(self._buf) > self._max:  # a peer that never ends an event: drop it
            self._buf = b""
        return events

    @property
    def partial(self) -> bool:
        """Part of an event was fed and not yet ended (nothing may be sent between its parts)."""
        return bool(self._buf.strip())

    def flush(self) -> list[SseEvent]:
        """The last event when the stream ended without a blank line."""
        block, self._buf = self._buf, b""
        ev = _parse_block(block) if block.strip() else None
        return [ev] if ev is not None else []


def _parse_block(block: bytes) -> SseEvent | None:
    name: str | None = None
    data: list[str] = []
    for line in block.decode("utf-8", "replace").split("\n"):
        if not line or line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if name is None and not data:
        return None
    return SseEvent(name, "\n".join(data), block)


def encode(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def loads_object(text: str | bytes) -> dict[str, Any] | None:
    """JSON object or ``None`` (garbage, JSON that is not an object, or nested too deeply for
    the parser: ``RecursionError``)."""
    try:
        value = jsonwire.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


#: how deeply a client's request may nest: far beyond any real request (tool schemas nest a few
#: levels), far below what breaks the JSON encoder or the translators (Python's recursion limit)
MAX_REQUEST_DEPTH = 256


#: how many structural tokens (``{``, ``[``, ``,`` outside strings) a client's request may hold:
#: each is a parsed container or value, which costs ~100 bytes of the runner's memory and time
#: on the event loop the gateway shares with the runner; a 32 MiB body of ``[{},{},...]`` took
#: ~1.5 GB and seconds to parse. A real request's structure (messages, content blocks, tool
#: schemas) is tens of thousands at most; its text (code full of commas) is inside strings
MAX_REQUEST_TOKENS = 200_000


class TooLarge(str):
    """A refusal of a request too big to parse (an HTTP 413, not a 400)."""


def request_object(raw: bytes) -> dict[str, Any] | str:
    """A client's JSON request body, or why it is refused (the message of a 400; a
    :class:`TooLarge`, of a 413)."""
    if structural_tokens(raw, MAX_REQUEST_TOKENS) > MAX_REQUEST_TOKENS:
        return TooLarge(f"request JSON has more than {MAX_REQUEST_TOKENS} structural tokens "
                        "(objects, arrays, values) outside its strings: refused unparsed")
    try:  # no NaN or Infinity: no provider takes them, and ``jsonwire.dumps`` would not keep them
        value = jsonwire.loads_finite(raw)
    except RecursionError:
        return f"request JSON nested deeper than {MAX_REQUEST_DEPTH} levels"
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        return "malformed JSON: the body must be a JSON object"
    if raw.count(b"[") + raw.count(b"{") > MAX_REQUEST_DEPTH and _deeper_than(
            value, MAX_REQUEST_DEPTH):
        return f"request JSON nested deeper than {MAX_REQUEST_DEPTH} levels"
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False

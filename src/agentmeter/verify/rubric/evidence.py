"""A judged item's ``evidence``: a concrete, machine-readable hint about what satisfies it.

Three forms (one predicate per item)::

    capture:<label>[.key|[n]|.length]... <op> <value>   op: == != > >= < <= contains exists
    file:<path> <op> [<value>]                            op: contains matches exists
    dir:<path> <op>                                       op: exists (a directory, not a file)

``<value>`` is JSON when it parses as JSON, else the rest of the line as text (``contains`` and
``matches`` take text; ``file: … contains`` is case-insensitive). The judge sees the hint as
written; the verifier embeds the parsed predicate, the capture's labels and the named files in the
prompt's evidence JSON, which is what the offline scripted judge evaluates (a test double:
``gateway/scripted/judge.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Source = Literal["capture", "file", "dir"]

_FORM = re.compile(r"^(capture|file|dir):(\S+)\s+(==|!=|>=|<=|>|<|contains|matches|exists)(?:\s+(.*))?$",
                   re.S)
_ACCESSOR = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_LABEL = re.compile(r"^[A-Za-z0-9_-]+")
_OPS: dict[str, tuple[str, ...]] = {
    "capture": ("==", "!=", ">", ">=", "<", "<=", "contains", "exists"),
    "file": ("contains", "matches", "exists"),
    "dir": ("exists",),
}


class Predicate(BaseModel):
    """A parsed ``evidence``: ``source`` ``target`` (label or workdir-relative path),
    ``path`` (accessors into a capture label's value), ``op`` and ``value``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Source
    target: str
    path: tuple[str | int, ...] = ()
    op: str
    value: Any = None


class EvidenceError(ValueError):
    """An ``evidence`` string that does not parse; the message says why."""


def _value(text: str | None, op: str) -> Any:
    if op == "exists":
        if text:
            raise EvidenceError("'exists' takes no value")
        return None
    if not text:
        raise EvidenceError(f"{op!r} needs a value")
    text = text.strip()
    if op == "matches":
        try:
            re.compile(text)
        except re.error as e:
            raise EvidenceError(f"invalid regular expression {text!r}: {e}") from None
        return text
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if op == "contains" and not isinstance(value, str):
        value = text  # "contains 3" looks for the text "3"
    return value


def parse(text: str) -> Predicate:
    """The predicate ``text`` states (raises EvidenceError naming the problem)."""
    m = _FORM.match(text.strip())
    if m is None:
        raise EvidenceError(f"{text!r} is not 'capture:<label> <op> <value>', "
                            "'file:<path> contains|matches|exists [<value>]' or "
                            "'dir:<path> exists'")
    source, target, op, rest = m.group(1), m.group(2), m.group(3), m.group(4)
    if op not in _OPS[source]:
        raise EvidenceError(f"{source}: evidence takes {', '.join(_OPS[source])}, not {op!r}")
    path: list[str | int] = []
    if source == "capture":
        head = _LABEL.match(target)
        if head is None:
            raise EvidenceError(f"{target!r}: a capture label is [A-Za-z0-9_-]+")
        tail = target[head.end():]
        pos = 0
        for acc in _ACCESSOR.finditer(tail):
            if acc.start() != pos:
                break
            path.append(acc.group(1) if acc.group(1) is not None else int(acc.group(2)))
            pos = acc.end()
        if pos != len(tail):
            raise EvidenceError(f"{target!r}: after the label, only .key, [n] and .length")
        target = head.group(0)
    elif target.startswith("/") or ".." in target.split("/"):
        raise EvidenceError(f"{target!r}: a {source} is a path relative to the working directory")
    else:
        target = target.rstrip("/") or target
    kind: Source = "capture" if source == "capture" else "dir" if source == "dir" else "file"
    return Predicate(source=kind, target=target,
                     path=tuple(path), op=op, value=_value(rest, op))

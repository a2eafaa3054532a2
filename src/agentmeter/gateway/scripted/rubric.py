"""The scripted judge's answer to a rubric prompt (a test double, offline and deterministic).

A rubric prompt's last user message starts with ``AGENTMETER RUBRIC JUDGE v1``; its fourth line
is ``Data nonce: <nonce>`` and it holds one data block named ``evidence`` under that nonce
(``verify/quoting.py``), written by the rubric verifier (``verify/rubric/judging.py``)::

    {"judge": "text"|"vision",
     "items": [{"id": "...", "evidence": null | {"source": "capture"|"file"|"dir",
                "target": "...", "path": ["key", 0, "length"], "op": "==", "value": ...},
                "agent_made": ["entries the agent made or changed that the item is about"]}],
     "capture_labels": {label: value} | null, "files": {path: text | null},
     "dirs": {path: bool}, "deliverables": [names given to the text judge],
     "images": [names of attached images]}

Strict, per item: with ``evidence``, satisfied iff the predicate holds on the labels / files /
directories; without, satisfied iff the agent made or changed something the item is about (its
``inputs``, else anything in the working directory: a file or a directory; what the task seeded,
such as released assets, is not evidence) and, for the vision judge, images were attached. Mode
``always`` satisfies every item, ``never`` none. The reply is the JSON the verifier asks for;
its score is round(10 · satisfied / items).
"""

from __future__ import annotations

import json
import re
from typing import Any

HEADER = "AGENTMETER RUBRIC JUDGE v1"
NONCE_LINE = "Data nonce: "
_MISSING = object()


def nonce_of(text: str) -> str | None:
    """The prompt's nonce, from the harness's fourth line (before anything quoted)."""
    lines = text.split("\n", 4)
    if len(lines) < 4 or not lines[3].startswith(NONCE_LINE):
        return None
    nonce = lines[3][len(NONCE_LINE):]
    return nonce if re.fullmatch(r"[0-9a-f]{8,}", nonce) else None


def block_of(text: str, nonce: str, name: str) -> str | None:
    """The content of the first data block ``name`` under ``nonce``."""
    head = f"<<<DATA {nonce} {name}>>>\n"
    at = text.find(head)
    end = text.find(f"<<<END DATA {nonce}>>>", at + len(head))
    return None if at < 0 or end < 0 else text[at + len(head):end]


def evidence_of(text: str) -> dict[str, Any] | None:
    """The evidence block under the prompt's nonce."""
    nonce = nonce_of(text)
    content = None if nonce is None else block_of(text, nonce, "evidence")
    if content is None:
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _at(value: Any, path: list[Any]) -> Any:
    for acc in path:
        if acc == "length" and isinstance(value, (list, str, dict)):
            value = len(value)
            continue
        index = isinstance(acc, int) and isinstance(value, list) and 0 <= acc < len(value)
        if not (index or (isinstance(acc, str) and isinstance(value, dict) and acc in value)):
            return _MISSING
        value = value[acc]
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare(op: str, actual: Any, expected: Any) -> bool:
    if op == "==":
        return bool(actual == expected)
    if op == "!=":
        return bool(actual != expected)
    if op == "contains":
        if isinstance(actual, str):
            return str(expected) in actual
        if isinstance(actual, list):
            return expected in actual or str(expected) in [str(x) for x in actual]
        return isinstance(actual, dict) and str(expected) in actual
    if not (_number(actual) and _number(expected)):
        return False
    return bool({">": actual > expected, ">=": actual >= expected, "<": actual < expected,
                 "<=": actual <= expected}.get(op, False))


def holds(predicate: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """Whether ``predicate`` (a parsed ``evidence``) holds on the prompt's evidence."""
    op, target, expected = predicate.get("op"), predicate.get("target"), predicate.get("value")
    if predicate.get("source") == "dir":
        dirs = evidence.get("dirs") or {}
        return isinstance(dirs, dict) and dirs.get(target) is True
    if predicate.get("source") == "file":
        files = evidence.get("files") or {}
        text = files.get(target) if isinstance(files, dict) else None
        if op == "exists" or not isinstance(text, str):
            return isinstance(text, str)
        if op == "contains":
            return str(expected).casefold() in text.casefold()
        return op == "matches" and re.search(str(expected), text, re.M) is not None
    labels = evidence.get("capture_labels") or {}
    if not isinstance(labels, dict) or target not in labels:
        return False
    path = predicate.get("path")
    actual = _at(labels[target], path if isinstance(path, list) else [])
    if actual is _MISSING:
        return False
    return op == "exists" or _compare(str(op), actual, expected)


def answer(mode: str, text: str) -> str:
    """The reply text to the rubric prompt ``text`` in ``mode``."""
    evidence = evidence_of(text)
    if evidence is None:
        return json.dumps({"items": [], "score": 0, "confidence": 1.0,
                           "reason": "no evidence block in the prompt (scripted judge)"})
    kind = evidence.get("judge")
    given = evidence.get("images") if kind == "vision" else evidence.get("deliverables")
    items = [i for i in evidence.get("items") or [] if isinstance(i, dict)]
    verdicts = []
    for item in items:
        pred = item.get("evidence")
        if mode in ("always", "never"):
            ok, why = mode == "always", f"{mode} satisfied" if mode == "always" else "never satisfied"
        elif isinstance(pred, dict):
            ok = holds(pred, evidence)
            why = "the evidence holds" if ok else "the evidence does not hold"
        else:
            made = item.get("agent_made")
            ok = bool(made) and (kind != "vision" or bool(given))
            why = ("the agent made what the item is about" if ok else
                   "no images to judge" if made else
                   "the agent made nothing the item is about")
        verdicts.append({"id": item.get("id"), "satisfied": ok, "reason": f"{why} (scripted judge)"})
    satisfied = sum(1 for v in verdicts if v["satisfied"])
    score = round(10 * satisfied / len(verdicts)) if verdicts else 0
    return json.dumps({"items": verdicts, "score": score, "confidence": 1.0,
                       "reason": f"{satisfied} of {len(verdicts)} items satisfied "
                                 f"(scripted judge:{mode})"})

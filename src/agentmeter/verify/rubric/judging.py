"""The rubric's text and vision judges: prompts, the call, and reading the reply.

One call per judge kind and round, all its items in one prompt. The system prompt is the paper's
role (AgencyBench App. A.2: "Senior Code Compliance Auditor" / "Visual Grounding and UI/UX
Verification Specialist", their protocol and 0-10 bands) with the released evaluators' anchors
(10/8/6/4/2/0) and, for the vision judge, the released stacking aesthetic penalties
(judge_texts.py). The user prompt's first line is ``AGENTMETER RUBRIC JUDGE v1``, its fourth
``Data nonce: <nonce>``. Outside data blocks (the harness's facts): the task's instruction, the
items (with their ``evidence`` hints), which deterministic checks passed, the media counts. Inside
data blocks under the per-call nonce (``verify/quoting.py``; the system prompt says their content
is untrusted): the checks' reasons (they quote program output), the working directory's listing
(directories ``name/`` and files, one JSON string a line), the machine-readable ``evidence`` block
(parsed predicates, capture labels, the files and directories evidence names, per item the entries
the agent made or changed (not as the task seeded them), what deliverables and images were given:
what the offline scripted judge evaluates), the deliverables (text judge: the ``inputs`` files,
else every non-hidden file, one block each with its path escaped on the first line; binary files
by size), the capture diagnostics and the media names. The vision judge gets the capture's
screenshots and ``inputs`` images as images, then frames sampled from each video (the capture's
recording, video ``inputs``; frames.py), or the reason there are none.

The reply must hold one JSON object ``{"items": [{"id", "satisfied", "reason"}], "score",
"confidence", "reason"}``: the whole reply, else its outermost ``{…}``. Coercions (spec §3.2):
score to an integer (floats rounded, strings → their first number, bool/None → 0) clamped to
0-10; confidence clamped to 0-1. Scoring ``items`` needs a verdict for every item of the judge
(its score, if absent, is the items' weighted share); scoring ``judges`` needs ``score`` (items
without a verdict follow ``score >= 6``). A reply that does not hold what is needed is asked
again once, then raises VerificationError: an evaluation fault, never a zero. Each call carries
the reply's JSON schema (:func:`reply_schema`: one entry per item in order, with its id fixed,
the score 0-10, bounded reasons), which a judge model with constrained decoding follows
(runner/judging.py); the reply is parsed the same way either way.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from agentmeter.verify import quoting
from agentmeter.verify.judge import (
    JudgeClient,
    JudgeImage,
    JudgeMessage,
    bounded_text,
    rubric_max_tokens,
)
from agentmeter.verify.protocol import VerificationError
from agentmeter.verify.rubric.checks import Deliverables, ItemVerdict
from agentmeter.verify.rubric.config import RubricItem, Scoring
from agentmeter.verify.rubric.frames import Frames
from agentmeter.verify.rubric.judge_texts import ANSWER, SYSTEM

HEADER = "AGENTMETER RUBRIC JUDGE v1"
NONCE_LINE = "Data nonce: "
JudgeKind = Literal["text", "vision"]
PASS_SCORE = 6

#: prompt budgets (characters): one deliverable file, all of them, the diagnostics
FILE_CHARS = 20_000
DELIVERABLE_CHARS = 150_000
TEXT_DIAGNOSTICS_CHARS = 20_000
VISION_DIAGNOSTICS_CHARS = 4_000  # the released vision judge's cut
LABEL_CHARS = 20_000
#: the most working-directory entries listed, and agent-made entries per item in the evidence
LISTING_ENTRIES = 2_000
MADE_ENTRIES = 200
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".webp": "image/webp", ".gif": "image/gif"}


@dataclass
class JudgeResult:
    """One judge's reading of its items."""

    kind: JudgeKind
    score: int
    confidence: float
    reason: str
    items: dict[str, tuple[bool, str]] = field(default_factory=dict)
    model: str = ""


@dataclass
class JudgeInputs:
    """What the verifier gathered for the judges."""

    task_id: str
    instruction: str
    deliverables: Deliverables
    checks: list[ItemVerdict]
    diagnostics: dict[str, Any] | None = None
    screenshots: list[JudgeImage] = field(default_factory=list)
    screenshot_names: list[tuple[str, int]] = field(default_factory=list)
    videos: list[tuple[str, int]] = field(default_factory=list)
    #: frames sampled from each video (frames.py), attached after the screenshots
    frames: list[Frames] = field(default_factory=list)


def _dump(value: Any, limit: int | None = None) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"...[truncated: {len(text) - limit} more characters]"
    return text


def _text(data: bytes, limit: int) -> str | None:
    """``data`` as UTF-8 text (a character cut by the read limit dropped), None if binary."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if len(data) >= limit and e.start >= len(data) - 3 and b"\0" not in data:
            return data[:e.start].decode("utf-8", errors="replace")
        return None


def deliverable_blocks(nonce: str, files: Deliverables, items: list[RubricItem]
                  ) -> tuple[list[str], list[str]]:
    """The deliverables' data blocks (text judge: text files whole up to the budgets, binary
    files by size) and the names given."""
    patterns = [p for i in items for p in i.inputs]
    names = files.glob(patterns, hidden=bool(patterns))
    parts: list[str] = []
    given: list[str] = []
    budget = DELIVERABLE_CHARS
    for rel in names:
        data = files.read(rel, FILE_CHARS * 4)
        if data is None:
            continue
        text = _text(data, FILE_CHARS * 4)
        if text is None:
            parts.append(quoting.block(nonce, "binary-file", f"({files.size(rel)} bytes)",
                                       path=rel))
            given.append(rel)
            continue
        if len(text) > FILE_CHARS:
            text = text[:FILE_CHARS] + f"\n...[truncated: {files.size(rel)} bytes in all]"
        if len(text) > budget:
            parts.append(quoting.block(nonce, "omitted-file", "(the prompt's budget is spent)",
                                       path=rel))
            continue
        budget -= len(text)
        parts.append(quoting.block(nonce, "deliverable", text, path=rel))
        given.append(rel)
    return parts, given


def listing(files: Deliverables) -> str:
    """Every directory (``name/``) and file of the working directory, one JSON string a line."""
    rows = [f"{d}/" for d in files.directories()] + files.files()
    shown = sorted(rows)[:LISTING_ENTRIES]
    more = len(rows) - len(shown)
    return "\n".join(quoting.escape(r) for r in shown) + (f"\n...[{more} more]" if more else "")


def _labels(diagnostics: dict[str, Any] | None) -> dict[str, Any] | None:
    if diagnostics is None:
        return None
    labels = diagnostics.get("labels")
    if not isinstance(labels, dict):
        return {}
    return {k: v if len(_dump(v)) <= LABEL_CHARS else "[too large to show]"
            for k, v in labels.items()}


def _matching(entries: list[str], patterns: list[str]) -> list[str]:
    if not patterns:
        return entries
    alts = {q for pat in patterns for p in (pat, pat.replace("**/", ""))
            for q in (p, p.rstrip("/") + "/")}
    return [e for e in entries if any(fnmatch.fnmatchcase(e, a) or e.startswith(a.rstrip("*"))
                                      and a.endswith("/") for a in alts)]


def evidence(kind: JudgeKind, items: list[RubricItem], inputs: JudgeInputs,
             given: list[str], images: list[str]) -> dict[str, Any]:
    """The machine-readable evidence (what the scripted judge evaluates)."""
    files: dict[str, str | None] = {}
    dirs: dict[str, bool] = {}
    for item in items:
        p = item.predicate
        if p is not None and p.source == "file" and p.target not in files:
            data = inputs.deliverables.read(p.target, FILE_CHARS)
            files[p.target] = None if data is None else data.decode("utf-8", errors="replace")
        if p is not None and p.source == "dir":
            dirs[p.target] = inputs.deliverables.is_dir(p.target)
    made = inputs.deliverables.agent_made()
    return {
        "judge": kind,
        "items": [{"id": i.id, "evidence": None if i.predicate is None
                   else i.predicate.model_dump(mode="json"),
                   "agent_made": _matching(made, i.inputs)[:MADE_ENTRIES]} for i in items],
        "capture_labels": _labels(inputs.diagnostics),
        "files": files,
        "dirs": dirs,
        "deliverables": given,
        "images": images,
    }


def prompt(kind: JudgeKind, items: list[RubricItem], inputs: JudgeInputs) -> list[JudgeMessage]:
    """The judge's messages (images after the text of the user message). Everything the agent
    made is quoted in data blocks under one per-call nonce (``verify/quoting.py``)."""
    given: list[str] = []
    patterns = [p for i in items for p in i.inputs]
    deliverable_names = (inputs.deliverables.glob(patterns, hidden=bool(patterns))
                         if kind == "text" else [])
    images = [n for n, _ in inputs.screenshot_names]
    reasons = {c.id: c.reason for c in inputs.checks}
    listed = listing(inputs.deliverables)
    media = ([n for n, _ in inputs.screenshot_names] + [n for n, _ in inputs.videos]
             + [f.problem or "" for f in inputs.frames])
    diag = None
    if inputs.diagnostics is not None:
        diag = _dump(inputs.diagnostics, TEXT_DIAGNOSTICS_CHARS if kind == "text"
                     else VISION_DIAGNOSTICS_CHARS)
    # the nonce is drawn once everything quoted is known: no quoted text contains it
    quoted = [listed, _dump(reasons), diag or "", *media, *deliverable_names]
    for rel in deliverable_names:
        data = inputs.deliverables.read(rel, FILE_CHARS * 4)
        if data is not None:
            quoted.append(data.decode("utf-8", errors="replace"))
    ev0 = evidence(kind, items, inputs, [], [])
    quoted.append(_dump(ev0))
    nonce = quoting.nonce_for(quoted)
    body: list[str] = []
    if kind == "text":
        parts, given = deliverable_blocks(nonce, inputs.deliverables, items)
        body += ["## Deliverables (each file in its own data block)",
                 *(parts or ["(no deliverables)"])]
    if inputs.deliverables.root is None:
        body.append(f"(the working directory could not be read: {inputs.deliverables.problem})")
    if diag is not None:
        body += ["", "## Browser capture diagnostics", quoting.block(nonce, "diagnostics", diag)]
    ev = evidence(kind, items, inputs, given, images if kind == "vision" else [])
    lines = [HEADER, f"Task ID: {inputs.task_id}", f"Judge: {kind}", f"Data nonce: {nonce}",
             quoting.untrusted_notice(nonce), "",
             "## Task (the instruction the agent was given)", inputs.instruction.strip(), "",
             "## Rubric items to judge"]
    for n, i in enumerate(items, 1):
        hint = f"\n   Evidence to look for: {i.evidence}" if i.evidence else ""
        lines.append(f"{n}. [{i.id}] {i.description} (weight {i.weight:g}){hint}")
    checks = [f"- [{c.id}] {c.description}: {'satisfied' if c.satisfied else 'NOT satisfied'}"
              for c in inputs.checks]
    shots = f"{len(inputs.screenshot_names)} attached in order" if images else "none"
    frame_images = [JudgeImage(path=p, media_type="image/png") for f in inputs.frames
                    for p in f.paths] if kind == "vision" else []
    frames_line = (f"{len(frame_images)} frames sampled from them attached after the "
                   "screenshots" if frame_images else
                   "their frames not attached" if kind == "vision" and inputs.frames else
                   "not attached")
    lines += ["", "## Deterministic checks already decided by the harness (context only)",
              *(checks or ["(none)"])]
    if checks:
        lines += ["Their output (JSON: item id -> the check's reason, quoting program output):",
                  quoting.block(nonce, "check-output", _dump(reasons))]
    lines += ["", "## Working directory: every directory (name/) and file, one JSON string a line",
              quoting.block(nonce, "listing", listed), "",
              "## Evidence (machine-readable; quotes agent-made content)",
              quoting.block(nonce, "evidence", _dump(ev)),
              "", *body, "", "## Media",
              f"Screenshots: {shots}; videos: {len(inputs.videos)}, {frames_line}. Their "
              "names and sizes, and each video's frames (name, seconds into the video) or why "
              "it has none:",
              quoting.block(nonce, "media", _dump(
                  {"screenshots": inputs.screenshot_names, "videos": inputs.videos,
                   "video_frames": {f.video: ({"frames": [[p.name, t] for p, t in
                                                          zip(f.paths, f.times, strict=True)]}
                                              if f.paths else {"problem": f.problem})
                                    for f in inputs.frames}})),
              "", "## Answer", ANSWER]
    content: list[str | JudgeImage] = ["\n".join(lines) + "\n"]
    if kind == "vision":
        content += inputs.screenshots
        content += frame_images
    system = f"{SYSTEM[kind]}\n{quoting.untrusted_notice(nonce)}"
    return [JudgeMessage(role="system", content=(system,)),
            JudgeMessage(role="user", content=tuple(content))]


# --- the reply --------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TRUE = {"true", "yes", "y", "satisfied", "pass", "passed", "met", "1"}
_FALSE = {"false", "no", "n", "not satisfied", "unsatisfied", "fail", "failed", "not met", "0",
          "not demonstrated"}


def extract_object(text: str) -> dict[str, Any] | None:
    """The reply's JSON object: the whole text, else from its first '{' to its last '}'."""
    text = text.strip()
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for c in candidates:
        try:
            obj = json.loads(c)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    return None


def coerce_score(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _NUMBER.search(str(value))
        number = float(m.group(0)) if m else 0.0
    if not math.isfinite(number):
        return 0
    return max(0, min(10, int(round(number))))


def coerce_confidence(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, min(1.0, round(number, 1))) if math.isfinite(number) else 0.0


def coerce_satisfied(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        v = value.strip().lower()
        return True if v in _TRUE else False if v in _FALSE else None
    return None


def parse_reply(kind: JudgeKind, text: str, items: list[RubricItem],
                scoring: Scoring) -> JudgeResult | None:
    """The judge's reading, or None when the reply does not hold what ``scoring`` needs."""
    obj = extract_object(text)
    if obj is None:
        return None
    verdicts: dict[str, tuple[bool, str]] = {}
    raw_items = obj.get("items")
    for entry in raw_items if isinstance(raw_items, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        sat = coerce_satisfied(entry.get("satisfied"))
        if sat is not None and entry["id"] not in verdicts:
            verdicts[entry["id"]] = (sat, str(entry.get("reason", ""))[:500])
    missing = [i for i in items if i.id not in verdicts]
    if scoring == "items" and missing:
        return None
    if scoring == "judges" and "score" not in obj:
        return None
    if "score" in obj:
        score = coerce_score(obj["score"])
    else:
        total = sum(i.weight for i in items)
        score = round(10 * sum(i.weight for i in items if verdicts[i.id][0]) / total)
    for i in missing:
        verdicts[i.id] = (score >= PASS_SCORE, f"no per-item verdict; the {kind} judge's "
                          f"score is {score}/10")
    reason = obj.get("reason", obj.get("comment", ""))
    return JudgeResult(kind=kind, score=score, confidence=coerce_confidence(obj.get("confidence")),
                       reason=str(reason)[:2000],
                       items={i.id: verdicts[i.id] for i in items})


#: the longest reasons the reply schema allows (characters): an item's, the overall one
ITEM_REASON_CHARS = 160
REASON_CHARS = 200


def reply_schema(items: list[RubricItem]) -> dict[str, Any]:
    """The reply's JSON schema: ``items`` holds exactly one entry per item, in order, its id
    fixed; the score one of 0-10, the confidence one of 0.0-1.0 in tenths, reasons bounded."""
    entries = [{"type": "object",
                "properties": {"id": {"const": i.id}, "satisfied": {"type": "boolean"},
                               "reason": bounded_text(ITEM_REASON_CHARS)},
                "required": ["id", "satisfied", "reason"], "additionalProperties": False}
               for i in items]
    return {"type": "object",
            "properties": {
                "items": {"type": "array", "prefixItems": entries, "items": False,
                          "minItems": len(items), "maxItems": len(items)},
                "score": {"enum": list(range(11))},
                "confidence": {"enum": [n / 10 for n in range(11)]},
                "reason": bounded_text(REASON_CHARS)},
            "required": ["items", "score", "confidence", "reason"],
            "additionalProperties": False}


async def ask(judge: JudgeClient, kind: JudgeKind, messages: list[JudgeMessage],
              items: list[RubricItem], scoring: Scoring, replies: list[str]) -> JudgeResult:
    """Ask ``judge``; an unusable reply is asked again once, then VerificationError. Every
    reply text is appended to ``replies`` (for the artifacts) as it comes."""
    for _ in range(2):
        reply = await judge.complete(messages, temperature=0.0,
                                     max_tokens=rubric_max_tokens(len(items)),
                                     schema=reply_schema(items))
        replies.append(reply.text)
        result = parse_reply(kind, reply.text, items, scoring)
        if result is not None:
            result.model = reply.model
            return result
    raise VerificationError(f"the {kind} judge ({judge.model}) answered twice without a usable "
                            f"verdict: {replies[-1][:200]!r}")


def image_of(path_name: str) -> str | None:
    """The media type of an image file name, or None when it is not one a judge takes."""
    for suffix, media in IMAGE_TYPES.items():
        if path_name.lower().endswith(suffix):
            return media
    return None

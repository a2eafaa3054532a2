"""The scripted judge (``scripted/judge[:normalized|always|never|garbage]``): a test double for
grading.

It answers the semantic-equivalence prompt of a differential test offline and deterministically:
the last user message opens with ``AGENTMETER SM JUDGE v1`` and ``Data nonce: <nonce>`` and holds
the data blocks ``oracle-stdout`` and ``candidate-stdout`` under that nonce
(``verify/difftest/judging.py``; a prompt without that header may hold
``<oracle_stdout>…</oracle_stdout>`` and ``<candidate_stdout>…</candidate_stdout>``); the reply is
the JSON text ``{"equivalent": true|false, "reason": "..."}``. Modes: ``normalized`` (the default)
says equivalent iff both outputs are equal after :func:`normalize`; ``always`` and ``never`` answer
the same whatever the outputs. A prompt without the two outputs (e.g. a rubric judge) gets
``{"equivalent": false, "reason": "no outputs to compare (scripted judge)"}``. Replies name the
model ``scripted/judge:<mode>`` and its calls are recorded as scripted, like every policy.

A rubric prompt (its last user message starts with ``AGENTMETER RUBRIC JUDGE v1``, see
``verify/rubric/judging.py``) is answered per item from the prompt's ``evidence`` data block
(``rubric.py``); a user-simulation prompt (``USER_SIM_HEADER``, ``runner/feedback.py``) with the
failed items of its ``evaluation`` data block, as the released template feedback does.
``garbage`` answers every prompt with text that is not JSON (to exercise a
verifier's retry and failure path).
"""

from __future__ import annotations

import json
import re

from agentmeter.gateway.neutral import Completion
from agentmeter.gateway.scripted import rubric
from agentmeter.records import USER_SIM_HEADER

MODES = ("normalized", "always", "never", "garbage")
GARBAGE = ("This is not JSON: the scripted judge in mode 'garbage' (a test double) never answers "
           "in the requested format.")
DEFAULT_MODE = "normalized"

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_WS = re.compile(r"\s+")
_ORACLE = re.compile(r"<oracle_stdout>(.*?)</oracle_stdout>", re.S)
_CANDIDATE = re.compile(r"<candidate_stdout>(.*?)</candidate_stdout>", re.S)


def normalize(text: str) -> list[str]:
    """ANSI escapes removed, lower-cased, all whitespace within lines removed, empty lines
    dropped, lines sorted."""
    lines = (_WS.sub("", line) for line in _ANSI.sub("", text).lower().splitlines())
    return sorted(line for line in lines if line)


def _answer(equivalent: bool, reason: str) -> Completion:
    text = json.dumps({"equivalent": equivalent, "reason": f"{reason} (scripted judge)"})
    return Completion(text=text, finish="stop")


SM_HEADER = "AGENTMETER SM JUDGE v1"


def _block(text: str, name: str) -> str | None:
    """Data block ``name`` under the nonce on the prompt's second line."""
    lines = text.split("\n", 2)
    if len(lines) < 3 or not lines[1].startswith(rubric.NONCE_LINE):
        return None
    return rubric.block_of(text, lines[1][len(rubric.NONCE_LINE):], name)


def _user_sim(text: str) -> str:
    """The user simulation's report, rendered from the evaluation the prompt carries (the
    released template's content: the failed items and their reasons)."""
    found = _block(text, "evaluation")
    try:
        evaluation = json.loads(found) if found else {}
    except json.JSONDecodeError:
        evaluation = {}
    items = evaluation.get("failed_items") if isinstance(evaluation, dict) else None
    lines = ["Status: rejected. (scripted user simulation, a test double)"]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            lines.append(f"- Not met: {item.get('description') or item.get('id')}: "
                         f"{item.get('reason') or 'no reason given'}")
    if len(lines) == 1:
        lines.append(f"- What went wrong: {evaluation.get('problem') or 'the checks failed'}")
    lines.append("Please revise the deliverables so that every criterion above is met.")
    return "\n".join(lines)


def decide(mode: str, last_user_text: str) -> Completion:
    """The judge's reply to a prompt whose last user message is ``last_user_text``."""
    if mode == "garbage":
        return Completion(text=GARBAGE, finish="stop")
    if last_user_text.startswith(rubric.HEADER):
        return Completion(text=rubric.answer(mode, last_user_text), finish="stop")
    if last_user_text.startswith(USER_SIM_HEADER):
        return Completion(text=_user_sim(last_user_text), finish="stop")
    if last_user_text.startswith(SM_HEADER):
        oracle, candidate = (_block(last_user_text, "oracle-stdout"),
                             _block(last_user_text, "candidate-stdout"))
    else:
        found = _ORACLE.search(last_user_text), _CANDIDATE.search(last_user_text)
        oracle, candidate = (None if m is None else m.group(1) for m in found)
    if oracle is None or candidate is None:
        return _answer(False, "no outputs to compare")
    if mode == "always":
        return _answer(True, "always equivalent")
    if mode == "never":
        return _answer(False, "never equivalent")
    same = normalize(oracle) == normalize(candidate)
    return _answer(same, "equal after normalization" if same else "different after normalization")

"""Feedback after a failed evaluation: what a scenario's next round tells the agent.

AgencyBench's user simulation (paper §3.2): "If an agent completes only 6 of 10 rubrics, the user
simulation agent returns the 4 failed rubrics with their reasons." Two modes
(``[scenario] feedback``):

- ``template`` (default; what the released scripts do, deterministic, no model): the score, the
  threshold, and each failed rubric item with its reason (``verdict.extra["rubric_failed"]``),
  or the verifier's problem for a kind without items;
- ``user_sim``: the paper's user-simulation agent: the run's judge model, through the gateway
  from the host (metered as evaluation cost), writes the report from the same evaluation; the
  harness puts the opening line (status and score) before it. The prompt's second line is
  ``Data nonce: <nonce>``; the evaluation (its failed items' reasons quote judges and program
  output) is the data block ``evaluation`` under that per-call nonce, the score and threshold
  (the harness's facts) stand outside it (``verify/quoting.py``). The agent's deliverables go
  with it (the paper gives the user simulation the deliverables and artifacts): the working
  directory's listing and files, quoted as the text judge quotes them, and the media names. The
  call gives the reply's schema (``USER_SIM_SCHEMA``), which a judge model with constrained
  output follows.

Either way the text opens with ``FEEDBACK_OPENING``. An agent that continues its conversation gets
the feedback alone; one that starts afresh gets the step's instruction again, then the feedback.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentmeter.records import FEEDBACK_OPENING, USER_SIM_HEADER
from agentmeter.tasks.models import Task
from agentmeter.verify import quoting
from agentmeter.verify.judge import USER_SIM_MAX_TOKENS, JudgeClient, JudgeMessage, bounded_text
from agentmeter.verify.protocol import Verdict

if TYPE_CHECKING:
    from agentmeter.verify.rubric.checks import Deliverables

#: the most characters of one failed item's reason quoted back
REASON_CHARS = 400

USER_SIM_SYSTEM = """\
You are simulating the user who asked for this work. An evaluation of the agent's deliverables \
has just rejected them. Write the message you send back to the agent: (1) a status declaration \
(rejected, with the score), (2) a failure diagnosis naming each failed rubric item, (3) the root \
cause from the user's perspective, (4) concrete directives for revision. Be constructive and \
directive; do not solve the task yourself and do not reveal anything not in the evaluation."""


#: the user simulation's reply for a judge model with constrained output (runner/judging.py):
#: the four parts its system prompt asks for, each one bounded paragraph; a model without it
#: writes prose, taken as it is (``report_text``)
USER_SIM_PARTS = ("status", "diagnosis", "root_cause", "directives")
USER_SIM_PART_CHARS = 400  #: four of them stay within USER_SIM_MAX_TOKENS
USER_SIM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {p: bounded_text(USER_SIM_PART_CHARS) for p in USER_SIM_PARTS},
    "required": list(USER_SIM_PARTS), "additionalProperties": False}


def report_text(reply: str) -> str:
    """The user simulation's message: a reply in ``USER_SIM_SCHEMA``'s shape as its parts'
    paragraphs, in order; any other reply as it is."""
    try:
        obj = json.loads(reply)
    except ValueError:
        return reply.strip()
    if not (isinstance(obj, dict) and set(obj) == set(USER_SIM_PARTS)
            and all(isinstance(v, str) for v in obj.values())):
        return reply.strip()
    return "\n\n".join(obj[p].strip() for p in USER_SIM_PARTS if obj[p].strip())


def failed_items(verdict: Verdict) -> list[dict[str, Any]]:
    """The failed rubric items a verifier reported (``extra["rubric_failed"]``), if any."""
    raw = verdict.extra.get("rubric_failed")
    return [d for d in raw if isinstance(d, dict)] if isinstance(raw, list) else []


def opening(verdict: Verdict) -> str:
    score = "n/a" if verdict.reward is None else f"{10 * verdict.reward:.1f}/10"
    return (f"{FEEDBACK_OPENING} (score {score}; a pass needs "
            f"{10 * verdict.pass_threshold:.1f}/10).")


def template(verdict: Verdict) -> str:
    """The released scripts' feedback: what failed, and why."""
    lines = [opening(verdict)]
    items = failed_items(verdict)
    if items:
        lines.append("Failed criteria:")
        for item in items:
            what = str(item.get("description") or item.get("id") or "an item")
            reason = str(item.get("reason") or "").strip()[:REASON_CHARS]
            lines.append(f"- {what}" + (f": {reason}" if reason else ""))
    elif verdict.problem:
        lines.append(f"What went wrong: {verdict.problem[:REASON_CHARS]}")
    else:
        lines.append("The task's checks did not pass.")
    lines.append("Fix these and continue from where you left off.")
    return "\n".join(lines)


async def user_sim(verdict: Verdict, task: Task, judge: JudgeClient,
                   deliverables: Deliverables | None = None) -> str:
    """The paper's user simulation through the judge model (raises VerificationError when the
    model cannot answer: the harness then falls back to nothing, the round is infra). It sees
    what the text judge sees of the agent's work: the working directory's listing and its
    files (``deliverables``, a host copy), each in a data block, and the names of the
    verification's media (screenshots, video frames)."""
    from agentmeter.verify.rubric import judging

    evaluation = {"score": None if verdict.reward is None else round(10 * verdict.reward, 2),
                  "threshold": round(10 * verdict.pass_threshold, 2),
                  "failed_items": failed_items(verdict), "problem": verdict.problem}
    quoted = json.dumps(evaluation, indent=1, ensure_ascii=False)
    media = json.dumps([a.name for a in verdict.artifacts if a.kind in ("screenshot", "video")],
                       ensure_ascii=False)
    texts = [quoted, media]
    listing = None
    if deliverables is not None and deliverables.root is not None:
        listing = judging.listing(deliverables)
        texts.append(listing)
        for rel in deliverables.glob([], hidden=False):
            data = deliverables.read(rel, judging.FILE_CHARS * 4)
            texts += [rel] + ([] if data is None else [data.decode("utf-8", errors="replace")])
    nonce = quoting.nonce_for(texts)  # drawn once everything quoted is known
    work = ["## The agent's work"]
    if listing is not None and deliverables is not None:
        parts, _ = judging.deliverable_blocks(nonce, deliverables, [])
        work += ["Working directory: every directory (name/) and file, one JSON string a line:",
                 quoting.block(nonce, "listing", listing),
                 "Its files (each in its own data block):", *(parts or ["(no files)"])]
    else:
        why = "not given" if deliverables is None else deliverables.problem
        work.append(f"(the working directory could not be read: {why})")
    work += ["Media the evaluation recorded (names):", quoting.block(nonce, "media", media)]
    prompt = (f"{USER_SIM_HEADER}\nData nonce: {nonce}\n{quoting.untrusted_notice(nonce)}\n\n"
              f"## The task the agent was given\n{task.instruction}\n\n"
              f"## The evaluation\nScore {evaluation['score']}/10; a pass needs "
              f"{evaluation['threshold']}/10. The evaluation's details (JSON):\n"
              f"{quoting.block(nonce, 'evaluation', quoted)}\n\n" + "\n".join(work) + "\n")
    system = f"{USER_SIM_SYSTEM}\n{quoting.untrusted_notice(nonce)}"
    reply = await judge.complete([JudgeMessage(role="system", content=(system,)),
                                  JudgeMessage(role="user", content=(prompt,))],
                                 max_tokens=USER_SIM_MAX_TOKENS, schema=USER_SIM_SCHEMA)
    return f"{opening(verdict)}\n\n{report_text(reply.text)}"


def next_prompt(task: Task, feedback: str, continued: bool) -> str:
    """What the next round sends: the feedback alone to an agent that kept its conversation,
    else the instruction again followed by the feedback."""
    if continued:
        return feedback
    return f"{task.instruction.rstrip()}\n\n---\n\n{feedback}"

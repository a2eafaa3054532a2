"""The SM judge (spec §5.3): is the candidate's stdout semantically the oracle's?

Asked, on the host through the harness's judge client (metered as evaluation cost), for every valid
case where the candidate exited 0 and EM failed (every SM variant is decided without a judge
elsewhere). One call per distinct (oracle stdout, candidate stdout) pair; each stdout is cut to
``judge_max_chars`` with a marker. The prompt opens with ``AGENTMETER SM JUDGE v1`` and ``Data
nonce: <nonce>``; both stdouts are quoted in data blocks (``oracle-stdout``, ``candidate-stdout``)
under that per-call nonce, and the command line is a JSON string (``verify/quoting.py``): program
output cannot add a line to the prompt outside its block. The reply must hold ``{"equivalent":
true|false, "reason": "..."}``; an unparsable reply is asked again once, then the case's verdict is
n/a (its class's SM is n/a). A call the gateway cannot complete raises ``VerificationError``.
The call carries the reply's JSON schema (``SCHEMA``), which a judge model with constrained
decoding follows (runner/judging.py); the reply is parsed the same way either way.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

from agentmeter.records import CaseOutcome
from agentmeter.verify import quoting
from agentmeter.verify.difftest.compare import with_verdict
from agentmeter.verify.difftest.config import DifftestConfig
from agentmeter.verify.judge import SM_MAX_TOKENS, JudgeClient, JudgeMessage, bounded_text

#: judge calls in flight at once per trial
CONCURRENCY = 8
HEADER = "AGENTMETER SM JUDGE v1"

SYSTEM = (
    "You compare the standard output of two command-line programs run with the same command "
    "and the same input files: a reference program and a reimplementation. Decide whether the "
    "core semantic content and informational payload of the two outputs are equivalent, "
    "completely disregarding superficial stylistic differences (spacing, ordering of "
    "independent items, wording of labels, colour, formatting). Answer with one JSON object "
    'only: {"equivalent": true or false, "reason": "<one sentence>"}.\n')

_OBJECT = re.compile(r"\{.*\}", re.S)
#: the reply's longest reason in characters (what the schema allows; the parser keeps 500)
REASON_CHARS = 200
#: the reply's JSON schema, sent to a judge model with constrained decoding (verify/judge.py)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"equivalent": {"type": "boolean"}, "reason": bounded_text(REASON_CHARS)},
    "required": ["equivalent", "reason"], "additionalProperties": False}


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n...[truncated: {len(text) - limit} more characters]"


def prompt(o: CaseOutcome, cfg: DifftestConfig) -> list[JudgeMessage]:
    limit = cfg.judge_max_chars
    oracle, candidate = _cut(o.oracle_stdout, limit), _cut(o.candidate_stdout, limit)
    command = quoting.escape(o.command)
    nonce = quoting.nonce_for([oracle, candidate, command, o.cls])
    user = "\n".join([
        HEADER, f"Data nonce: {nonce}", f"Command class: {quoting.escape(o.cls)}",
        f"Command (a JSON string): {command}", "",
        "The reference program's standard output:",
        quoting.block(nonce, "oracle-stdout", oracle), "",
        "The reimplementation's standard output:",
        quoting.block(nonce, "candidate-stdout", candidate)]) + "\n"
    return [JudgeMessage(role="system", content=(SYSTEM + quoting.untrusted_notice(nonce),)),
            JudgeMessage(role="user", content=(user,))]


def parse_reply(text: str) -> tuple[bool, str] | None:
    m = _OBJECT.search(text)
    if m is None:
        return None
    try:
        obj = json.loads(m.group(0))
    except (ValueError, RecursionError):  # nested too deep for json: unusable, asked again
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("equivalent"), bool):
        return None
    return obj["equivalent"], str(obj.get("reason", ""))[:500]


async def _ask(judge: JudgeClient, messages: list[JudgeMessage]) -> tuple[bool | None, str]:
    reply = ""
    for _ in range(2):  # an unparsable reply is asked again once
        reply = (await judge.complete(messages, temperature=0.0, max_tokens=SM_MAX_TOKENS,
                                      schema=SCHEMA)).text
        parsed = parse_reply(reply)
        if parsed is not None:
            return parsed
    return None, f"unparsable judge reply: {reply[:200]!r}"


async def judge_outcomes(results: list[CaseOutcome], cfg: DifftestConfig,
                         judge: JudgeClient) -> list[CaseOutcome]:
    """``results`` with judge verdicts on the cases that need one."""
    pending: dict[str, asyncio.Future[tuple[bool | None, str]]] = {}
    gate = asyncio.Semaphore(CONCURRENCY)

    async def ask(o: CaseOutcome) -> tuple[bool | None, str]:
        async with gate:
            return await _ask(judge, prompt(o, cfg))

    keyed: list[tuple[CaseOutcome, str | None]] = []
    for o in results:
        if not o.needs_judge:
            keyed.append((o, None))
            continue
        key = hashlib.sha256(json.dumps([o.oracle_stdout, o.candidate_stdout]).encode()).hexdigest()
        if key not in pending:
            pending[key] = asyncio.ensure_future(ask(o))
        keyed.append((o, key))
    if pending:
        try:
            await asyncio.gather(*pending.values())
        finally:
            for f in pending.values():
                f.cancel()
    out = []
    for o, pair in keyed:
        if pair is None:
            out.append(o)
            continue
        equivalent, reason = pending[pair].result()
        out.append(with_verdict(o, equivalent, reason))
    return out

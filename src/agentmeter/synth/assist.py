"""Model-assisted synthesis (spec §3.3 mode 3, the paper's §2.2): an auxiliary model writes the
schema from the oracle's help, and execution feedback refines it.

The model is called from the host through the metering gateway (temperature 0, as the paper's
GPT-5.4), its cost booked as task construction in ``tests/synth.json`` (``model``), never as an
agent's. Round 1 asks for a ``schema.json`` (the format of ``schema.py``, whose description is
in the prompt) from the walked ``--help`` text and the tool's overview; a reply that is not a
valid schema is sent back with the error. Then the cases are run against the oracle; classes
without a working positive case are sent back with the oracle's errors, up to
``max_refinements`` rounds in all (the paper states no limit; 5 by default). Offline, the
auxiliary model is the labelled test double ``scripted/schema-from-file``, which answers with
the task's own ``schema.json``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from agentmeter.synth import schema as schema_module
from agentmeter.synth.schema import Schema, SchemaError, parse_schema
from agentmeter.verify.judge import JudgeClient, JudgeMessage

DEFAULT_MAX_REFINEMENTS = 5
#: output cap of one reply
MAX_TOKENS = 16_000
_FENCED = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)
_OBJECT = re.compile(r"\{.*\}", re.S)

#: the reply's JSON schema (schema.json's own), which a model with constrained output follows
#: (runner/judging.py); the reply is validated the same way either way
REPLY_SCHEMA: dict[str, Any] = Schema.model_json_schema()

SYSTEM = ("You design black-box differential tests for a command-line tool. Reply with one JSON "
          "object only: a schema.json in this format.\n\n" + (schema_module.__doc__ or ""))


class ModelUse(BaseModel):
    """What the auxiliary model did and cost (``synth.json``'s ``model``)."""

    model: str
    rounds: int = 0
    calls: int = 0
    usage: dict[str, Any] = Field(default_factory=dict)
    cost_usd: float | None = None
    feedback: list[str] = Field(default_factory=list, description="what each refinement said")


def first_prompt(command: str, overview: str, help_text: dict[str, str]) -> list[JudgeMessage]:
    pages = "\n\n".join(f"$ {argv} --help\n{text.rstrip()}" for argv, text in help_text.items())
    user = (f"The tool's command is `{command}`.\nOverview: {overview or '(none given)'}\n\n"
            f"Its help, every command:\n```\n{pages}\n```\n\nWrite the schema: one class per "
            "command/subcommand path with a valid combination of options (the help's "
            "constraints respected), value pools for common usage and boundary conditions, "
            "`invalid` values for error handling, and the fixture files the commands need.")
    return [JudgeMessage(role="system", content=(SYSTEM,)),
            JudgeMessage(role="user", content=(user,))]


def parse_reply(text: str, origin: str) -> Schema:
    """The schema in a reply (a fenced JSON block, else the outermost object)."""
    m = _FENCED.search(text) or _OBJECT.search(text)
    if m is None:
        raise SchemaError(f"{origin}: the reply holds no JSON object")
    try:
        data = json.loads(m.group(1) if m.re is _FENCED else m.group(0))
    except ValueError as e:
        raise SchemaError(f"{origin}: the reply's JSON does not parse: {e}") from None
    return parse_schema(data, origin)


async def ask(client: JudgeClient, messages: list[JudgeMessage], use: ModelUse,
              max_refinements: int) -> Schema:
    """A valid schema from the model, sending parse and validation errors back."""
    while True:
        use.rounds += 1
        reply = await client.complete(messages, temperature=0.0, max_tokens=MAX_TOKENS,
                                      schema=REPLY_SCHEMA)
        messages.append(JudgeMessage(role="assistant", content=(reply.text,)))
        try:
            return parse_reply(reply.text, f"{use.model} (round {use.rounds})")
        except SchemaError as e:
            if use.rounds > max_refinements:
                raise
            use.feedback.append(str(e))
            messages.append(JudgeMessage(role="user", content=(
                f"That is not a valid schema: {e}. Reply with the corrected schema only.",)))


def class_feedback(invalid: list[str], errors: dict[str, str]) -> str:
    lines = [f"- `{c}`: {errors.get(c, 'no positive case exited 0')}" for c in invalid]
    return ("Run against the real tool, these classes had no working positive case (the "
            "oracle's error shown):\n" + "\n".join(lines) + "\nFix their commands, values or "
            "fixtures, keep the classes that worked, and reply with the whole schema.")

"""Model access for judges: the interface the harness provides to verifiers that grade with a model.

A judge (rubric items, semantic equivalence of two outputs, a screenshot's look) is called by the
harness on the host, through the gateway, under the run's judge model: its calls are metered and
priced as evaluation cost, apart from the agent's, and no model is ever reachable from inside the
sandbox for grading. A verifier gets a :class:`JudgeClient` in its context, or ``None`` when the
run has no judge model (a kind that needs one then reports its judged keys as missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

#: output caps of the harness's judge calls (``max_tokens``): a judge's reply is one small JSON
#: object, and a model that never closes it (a tiny local model at temperature 0 repeats itself)
#: would otherwise generate to the end of its context window on every call
SM_MAX_TOKENS = 300  #: the CLI-Tool-Bench SM judge: ``{"equivalent", "reason"}``
RUBRIC_MAX_TOKENS_BASE = 512  #: a rubric judge: the score, confidence and overall reason ...
RUBRIC_MAX_TOKENS_PER_ITEM = 128  #: ... and one ``{"id", "satisfied", "reason"}`` per item
USER_SIM_MAX_TOKENS = 768  #: the user simulation's feedback (a few short paragraphs)


def rubric_max_tokens(items: int) -> int:
    """The output cap of a rubric judge's call over ``items`` items."""
    return RUBRIC_MAX_TOKENS_BASE + RUBRIC_MAX_TOKENS_PER_ITEM * items


class JudgeImage(BaseModel):
    """An image on the host given to a vision judge (e.g. a screenshot artifact)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    media_type: str = "image/png"


class JudgeMessage(BaseModel):
    """One message of a judge prompt: text and images in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: tuple[str | JudgeImage, ...]


class JudgeReply(BaseModel):
    """The judge model's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    model: str


def bounded_text(max_length: int) -> dict[str, Any]:
    """A reply schema's free-text field: at most ``max_length`` characters, none of them a
    quote, a backslash or a control character. The pattern matters to llama.cpp's grammar,
    whose JSON strings admit raw control characters: Gemma 3 270M wrote a raw newline in a
    reason, which no JSON parser takes (llama-cpp-python uses the pattern and ignores
    ``maxLength`` then, hence the length in the pattern too)."""
    return {"type": "string", "maxLength": max_length,
            "pattern": r'^[^"\\\x00-\x1f]{0,' + str(max_length) + "}$"}


class JudgeClient(Protocol):
    """Calls the run's judge model through the gateway, from the host.

    Each call is metered by the gateway as evaluation cost of the trial being verified. A call
    that cannot be completed (the upstream still failing after the gateway's retries) raises
    ``agentmeter.verify.protocol.VerificationError``: the evaluation is infra, never a zero.
    """

    @property
    def model(self) -> str: ...

    async def complete(self, messages: Sequence[JudgeMessage], *, temperature: float = 0.0,
                       max_tokens: int | None = None,
                       schema: dict[str, Any] | None = None) -> JudgeReply:
        """``schema``: the JSON schema of the reply the caller will parse. A client whose model
        declares constrained decoding (``structured_output`` in gateway/registry.py: the
        ``local/`` models, ``llamacpp/``) sends it so the model can only emit such an object;
        other clients ignore it. Either way the caller parses the reply strictly: a schema is a
        help to a small model, never a guarantee."""
        ...

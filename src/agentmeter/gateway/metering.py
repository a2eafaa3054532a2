"""Per-trial state and metering: budgets, call records, usage read from bodies and streams.

Two sums per trial: what the upstream *reported* (``usage``, ``cost_usd``: exact, ``None`` where
unknown) and what the budget is *charged* (``charged_tokens``, ``charged_usd``): the reported
usage, or for a served call whose usage is unknown an upper bound of it (``calls.usage_bound``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.bounds import TrialLoad
from agentmeter.gateway.neutral import NeutralUsage
from agentmeter.gateway.registry import UpstreamModel
from agentmeter.gateway.sse import SseEvent, loads_object
from agentmeter.records import ModelCallRecord, TokenUsage, WireApi

#: who makes a trial's calls: its agent, or a judge grading it (evaluation cost)
CallPurpose = Literal["agent", "judge"]


class Budget(BaseModel):
    """Per-trial limits; a call starting after one is reached is refused. Concurrent calls
    reserve their worst case first (``TrialState.reserve``): no budget is exceeded by more
    than one call's usage."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=0, description="input (incl. cached) + output; "
                                   "a served call with unknown usage is charged an upper bound")
    max_usd: float | None = Field(default=None, ge=0)
    max_calls: int | None = Field(default=None, ge=0)


class ScriptedContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    solution_script: str | None = Field(
        default=None, description="text of the task's solution script; the 'solver' replays it")


class TrialMeter(BaseModel):
    """What the gateway measured for one trial (returned by ``Gateway.close_trial``)."""

    trial_id: str
    model: str
    calls: list[ModelCallRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float | None = Field(default=None, description="None when unpriced or when a served "
                                   "call's usage is unknown (n/a, never a partial sum)")
    budget_exceeded: bool = False
    infra_error: str | None = None
    charged_tokens: int = Field(default=0, description="what the token budget was charged")
    charged_usd: float = Field(default=0.0, description="what the USD budget was charged")
    calls_without_usage: int = Field(default=0, description="served calls whose usage is unknown")
    stored_seqs: list[int] = Field(default_factory=list,
                                   description="calls already stored by the trial's call sink")
    sink_error: str | None = None
    next_seq: int = Field(default=0, description="the seq the trial's next call would have taken "
                          "(calls still under way at close included)")
    calls_in_flight: list[int] = Field(
        default_factory=list, description="seqs of calls started (sent upstream) and still under "
        "way at close: not in ``calls`` nor in the totals; the sink stores each as it ends")
    refused: int = Field(default=0, description="requests refused (hosted features, remote "
                         "media); beyond calls.MAX_RECORDED_REFUSALS not in ``calls``")


class CallStore(Protocol):
    """Where a ``StoreSink`` writes (``agentmeter.store.db.Store``)."""

    def add_call_batch(self, calls: Sequence[tuple[str, int, ModelCallRecord]]) -> None:
        """Write (run id, try number, call) items in one transaction, all or none."""


@dataclass(frozen=True)
class StoreSink:
    """A sink that stores each call of a trial in ``store`` as (``run_id``, ``try_number``):
    the gateway's writer commits the calls of every trial sharing the store that finished
    together in one transaction (``persist``). ``trial_id``: stored under this trial id
    instead of the call's (a judge's calls go with the trial it grades). ``after``: run on the
    writer thread once the call is committed, or on the event loop for a lone call committed
    there (``persist``) (e.g. a try's books settled again)."""

    store: CallStore
    run_id: str
    try_number: int
    trial_id: str | None = None
    after: Callable[[ModelCallRecord], None] | None = None


#: receives each finished call record (on the gateway's writer thread), e.g. to store it; a
#: ``StoreSink`` is written in batches with other trials' calls (group commit)
CallSink = Callable[[ModelCallRecord], None] | StoreSink


#: the error of a call record the gateway refused before sending it (``calls.refuse_request``)
REQUEST_REFUSED = "request_refused"


class TrialClosed(Exception):
    """The trial ended while a call waited to reserve its worst case (it is not served)."""


@dataclass(frozen=True)
class Reservation:
    """A call's worst case, held against its trial's budgets while it is under way."""

    tokens: int
    usd: float
    calls: int = 1
    #: answers the call asks for (chat ``n``, Gemini ``candidateCount``)
    answers: int = 1


def usage_unknown(record: ModelCallRecord) -> bool:
    """A served call (status 200) whose input or output tokens the upstream did not report."""
    return record.status_code == 200 and (record.usage.input is None or record.usage.output is None)


@dataclass
class TrialState:
    trial_id: str
    token: str
    model: UpstreamModel
    budget: Budget
    scripted: ScriptedContext
    priced: bool
    calls: list[ModelCallRecord] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    next_seq: int = 0
    metered_calls: int = 0  # calls that reached the upstream (refusals excluded)
    budget_exceeded: bool = False
    infra_error: str | None = None
    sink: CallSink | None = None
    purpose: CallPurpose = "agent"
    stored: set[int] = field(default_factory=set)  # seqs the sink stored (written by its thread)
    sink_error: str | None = None
    charged_tokens: int = 0
    charged_usd: float = 0.0
    calls_without_usage: int = 0
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    load: TrialLoad = field(default_factory=TrialLoad)  # requests and body bytes held (bounds)
    reserved_tokens: int = 0
    reserved_usd: float = 0.0
    reserved_calls: int = 0
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # set (and renewed) on a settle
    ended: bool = False  # the token is refused: calls waiting to reserve are not served
    running: set[int] = field(default_factory=set)  # seqs sent upstream and not yet finished
    hosted_allowed: bool = False  # provider-hosted tools and stored inputs pass (``hosted``)
    refused: int = 0  # requests refused (``calls.refuse_request``), recorded or not

    def __post_init__(self) -> None:
        self.idle.set()

    def begin_call(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def end_call(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    def take_seq(self) -> int:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    def over_budget(self) -> str | None:
        """Why the next call must be refused, or ``None``."""
        b = self.budget
        if b.max_calls is not None and self.metered_calls >= b.max_calls:
            return f"call budget of {b.max_calls} calls exhausted"
        if b.max_tokens is not None and self.charged_tokens >= b.max_tokens:
            return f"token budget of {b.max_tokens} tokens exhausted ({self.charged_tokens} charged)"
        if b.max_usd is not None and self.priced and self.charged_usd >= b.max_usd:
            return f"cost budget of ${b.max_usd:.4f} exhausted (${self.charged_usd:.4f} charged)"
        return None

    async def reserve(self, want: Reservation) -> str | None:
        """Hold a call's worst case against the budgets before it is served, or say why it is
        refused. Atomic across the trial's concurrent calls: the check and the reservation run
        with no await between them, on the gateway's one event loop (that is the lock). A call
        whose worst case does not fit beside the calls under way waits for them to settle; a
        call alone is served while no budget is used up. So the calls served together always
        fit, and a budget is exceeded by at most one call's true usage (the call served alone
        when its worst case was more than was left). That exception is for a call asking one
        answer: one asking several (``n = 128``) is served only when its worst case fits, else
        one call could overrun any budget by 128 answers (security review 2). Raises
        :class:`TrialClosed` when the trial ends while the call waits."""
        while True:
            if self.ended:
                raise TrialClosed(self.trial_id)
            reason = self.over_budget()
            if reason is not None:
                return reason
            if self._fits(want):
                break
            if self.reserved_calls == 0:
                if want.answers == 1:
                    break
                return (f"the call asks for {want.answers} answers, whose worst case "
                        f"({want.tokens} tokens) does not fit in what is left of the budget")
            await self.settled.wait()
        self.reserved_tokens += want.tokens
        self.reserved_usd += want.usd
        self.reserved_calls += want.calls
        return None

    def _fits(self, want: Reservation) -> bool:
        b = self.budget
        if b.max_calls is not None and \
                self.metered_calls + self.reserved_calls + want.calls > b.max_calls:
            return False
        if b.max_tokens is not None and \
                self.charged_tokens + self.reserved_tokens + want.tokens > b.max_tokens:
            return False
        return not (b.max_usd is not None and self.priced
                    and self.charged_usd + self.reserved_usd + want.usd > b.max_usd)

    def release(self, held: Reservation) -> None:
        """Give back a reservation (the call settled, or was never served); wakes the waiters."""
        self.reserved_tokens -= held.tokens
        self.reserved_usd -= held.usd
        self.reserved_calls -= held.calls
        self._wake()

    def end(self) -> None:
        """The trial's token is refused: calls waiting to reserve give up."""
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        waiters, self.settled = self.settled, asyncio.Event()
        waiters.set()

    def add(self, record: ModelCallRecord, charged: TokenUsage | None = None,
            charged_usd: float | None = None) -> None:
        """Count a finished call: its reported usage and cost, and its budget charge (by default
        the reported figures; ``charged`` when they are unknown)."""
        self.calls.append(record)
        self.running.discard(record.seq)
        if record.error != "budget_exceeded" and not (record.error or "").startswith(
                REQUEST_REFUSED):
            self.metered_calls += 1
        if usage_unknown(record):
            self.calls_without_usage += 1
        self.usage = self.usage + record.usage
        self.cost_usd += record.cost_usd or 0.0
        self.charged_tokens += (charged or record.usage).total
        self.charged_usd += (charged_usd if charged_usd is not None else record.cost_usd) or 0.0

    def meter(self) -> TrialMeter:
        # n/a, never a partial sum: a served call without usage or without a price (cache
        # tokens the price entry cannot price) makes the trial's cost unknown
        priced = (self.priced and self.calls_without_usage == 0
                  and all(c.cost_usd is not None for c in self.calls if c.status_code == 200))
        return TrialMeter(trial_id=self.trial_id, model=self.model.name, calls=list(self.calls),
                          usage=self.usage, cost_usd=self.cost_usd if priced else None,
                          budget_exceeded=self.budget_exceeded, infra_error=self.infra_error,
                          charged_tokens=self.charged_tokens, charged_usd=self.charged_usd,
                          calls_without_usage=self.calls_without_usage,
                          stored_seqs=sorted(self.stored), sink_error=self.sink_error,
                          next_seq=self.next_seq, calls_in_flight=sorted(self.running),
                          refused=self.refused)


def body_usage(api: WireApi, obj: dict[str, Any]) -> NeutralUsage | None:
    """The usage of a whole (non-streamed) reply body."""
    usage = obj.get("usageMetadata", obj.get("usage_metadata")) if api == "gemini" \
        else obj.get("usage")
    return usage_fields.parse(api, usage) if isinstance(usage, dict) else None


class StreamUsage:
    """Reads the usage (and any error) an upstream reported inside its SSE stream."""

    def __init__(self, api: WireApi) -> None:
        self.api = api
        self.usage: NeutralUsage | None = None
        self.error: str | None = None
        #: the API's final event arrived ([DONE], response.completed/…, message_stop)
        self.finished = False
        self._choices = False  # chat: a chunk with a choice came
        self._messages: dict[str, Any] = {}

    @property
    def empty(self) -> bool:
        """A chat stream without any choice: the upstream answered nothing."""
        return self.api == "chat" and not self._choices

    def feed(self, ev: SseEvent) -> None:
        data = ev.data
        if self.api == "gemini":
            self._gemini(data)
            return
        if self.api == "chat":
            if data == "[DONE]":
                self.finished = True
                return
            if not self._choices and '"choices":[{' in data.replace(" ", ""):
                self._choices = True
            if '"usage"' in data or '"finish_reason"' in data:
                obj = loads_object(data)
                if obj is not None and isinstance(obj.get("usage"), dict):
                    self.usage = usage_fields.from_chat(obj["usage"])
                # some servers end with the finish reason (and usage) and no ``[DONE]``: the
                # answer is whole, not a truncated stream
                choices = obj.get("choices") if obj is not None else None
                if isinstance(choices, list) and any(
                        isinstance(c, dict) and c.get("finish_reason") for c in choices):
                    self.finished = True
            elif '"error"' in data:
                self._error(data)
            return
        kind = ev.event
        if kind is None and '"type"' in data:
            obj = loads_object(data)
            kind = str(obj.get("type")) if obj else None
        if self.api == "responses":
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self.finished = True
                obj = loads_object(data)
                resp = obj.get("response") if obj else None
                if isinstance(resp, dict) and isinstance(resp.get("usage"), dict):
                    self.usage = usage_fields.from_responses(resp["usage"])
            elif kind == "error":
                self._error(data)
            return
        if kind == "message_stop":
            self.finished = True
        elif kind in ("message_start", "message_delta"):
            obj = loads_object(data)
            if obj is None:
                return
            holder = obj.get("message") if kind == "message_start" else obj
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                self._messages.update(
                    {k: v for k, v in holder["usage"].items() if v is not None})
                self.usage = usage_fields.from_messages(self._messages)
        elif kind == "error":
            self._error(data)

    def _gemini(self, data: str) -> None:
        """Each event a whole response; the usage is cumulative (the last one counts); the final
        event is the one with a finish reason."""
        if not any(k in data for k in ("sage", "inish", '"error"', "lockReason")):
            return
        obj = loads_object(data)
        if obj is None:
            return
        if isinstance(obj.get("error"), dict):
            self._error(data)
        meta = obj.get("usageMetadata", obj.get("usage_metadata"))
        if isinstance(meta, dict):
            self.usage = usage_fields.from_gemini(meta)
        cands = obj.get("candidates")
        if isinstance(cands, list) and any(
                isinstance(c, dict) and (c.get("finishReason") or c.get("finish_reason"))
                for c in cands):
            self.finished = True
        feedback = obj.get("promptFeedback", obj.get("prompt_feedback"))
        if isinstance(feedback, dict) and feedback.get("blockReason", feedback.get("block_reason")):
            self.finished = True  # the prompt was blocked: no candidates will come

    def _error(self, data: str) -> None:
        obj = loads_object(data)
        err = obj.get("error") if obj else None
        if isinstance(err, dict):
            self.error = str(err.get("message") or err)[:500]

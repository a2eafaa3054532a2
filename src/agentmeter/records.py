"""Persisted records: the data contract between runner, gateway, store, metrics and report.

Everything that is written to the store is one of these pydantic models. Token counts are kept
exactly as the upstream reported them; ``None`` means "not exposed", never zero.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrialStatus(StrEnum):
    """The status taxonomy (README "Concepts", docs/architecture.md). ``pending``/``running``
    are not final."""

    PENDING = "pending"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    AGENT_ERROR = "agent_error"
    TIMEOUT = "timeout"
    BUDGET_EXCEEDED = "budget_exceeded"
    INFRA_INVALID = "infra_invalid"

    @property
    def final(self) -> bool:
        return self not in (TrialStatus.PENDING, TrialStatus.RUNNING)

    @property
    def scored(self) -> bool:
        """Counts towards a configuration's quality (infra_invalid does not)."""
        return self.final and self is not TrialStatus.INFRA_INVALID


#: the final statuses, in the order metrics code them (``FINAL_STATUSES[code]``)
FINAL_STATUSES: tuple[TrialStatus, ...] = tuple(s for s in TrialStatus if s.final)

WireApi = Literal["chat", "responses", "messages", "gemini"]

#: the model name of configurations whose agent uses no model (oracle, nop)
NO_MODEL = "none"
#: how the harness's feedback on a failed evaluation opens (a scenario's next round; the
#: scripted ``learner`` policy waits for it)
FEEDBACK_OPENING = "Your previous attempt was rejected"
#: the first line of the user-simulation prompt (the scripted judge recognises it)
USER_SIM_HEADER = "AGENTMETER USER SIMULATION v1"

#: model-name prefixes of the scripted test double (``scripted/<policy>``, and
#: ``scripted-chat/<policy>`` for its Chat-Completions-only variant)
SCRIPTED_PREFIXES = ("scripted/", "scripted-chat/")


def is_scripted(model_name: str) -> bool:
    """Whether a configuration's model is the scripted test double: its figures test the
    harness, they say nothing about a real model, and every output labels them so."""
    return model_name.startswith(SCRIPTED_PREFIXES)


#: artifact names the agents write and the exporters read
NATIVE_TRANSCRIPT = "native-transcript.json"
CLI_TRAJECTORY = "trajectory.json"


class TokenUsage(_Record):
    """Token usage of one call or a sum of calls. ``input`` includes cached input tokens."""

    input: int | None = None
    output: int | None = None
    cache_creation: int | None = None
    cache_read: int | None = None
    reasoning: int | None = None

    def __add__(self, other: TokenUsage) -> TokenUsage:
        def add(a: int | None, b: int | None) -> int | None:
            if a is None and b is None:
                return None
            return (a or 0) + (b or 0)

        return TokenUsage(
            input=add(self.input, other.input),
            output=add(self.output, other.output),
            cache_creation=add(self.cache_creation, other.cache_creation),
            cache_read=add(self.cache_read, other.cache_read),
            reasoning=add(self.reasoning, other.reasoning),
        )

    @property
    def raw_tokens(self) -> int | None:
        """Raw tokens T_i: input (incl. cached) + output; None when neither is exposed.
        The store computes the same in SQL (``store.expressions.raw_tokens``) and the metrics
        on columns (``TrialFrame.raw_tokens``)."""
        if self.input is None and self.output is None:
            return None
        return (self.input or 0) + (self.output or 0)

    @property
    def total(self) -> int:
        """Raw tokens with nothing exposed counted as 0 (what token budgets compare with)."""
        return self.raw_tokens or 0


#: the store's and the exported tables' column name of each usage field
USAGE_COLUMNS: dict[str, str] = {name: f"{name}_tokens" for name in TokenUsage.model_fields}


class ModelSpec(_Record):
    """The model half of a configuration."""

    name: str = Field(description="e.g. 'scripted/solver', 'openai/gpt-5', 'deepseek/deepseek-chat'")
    wire_api: WireApi | None = None
    price_key: str | None = None


class AgentSpec(_Record):
    """The agent half of a configuration."""

    name: str = Field(description="e.g. 'oracle', 'nop', 'native', 'codex', 'claude-code'")
    version: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class ConfigRecord(_Record):
    """A deployed unit: model x agent. ``id`` is a stable digest of both."""

    id: str
    model: ModelSpec
    agent: AgentSpec
    label: str

    @classmethod
    def of(cls, agent: AgentSpec, model: ModelSpec) -> ConfigRecord:
        """The configuration of ``agent`` x ``model``, with its stable id and label."""
        payload = json.dumps({"agent": agent.model_dump(), "model": model.model_dump()},
                             sort_keys=True)
        cid = hashlib.sha256(payload.encode()).hexdigest()[:12]
        version = f"@{agent.version}" if agent.version else ""
        label = (f"{agent.name}{version}" if model.name == NO_MODEL
                 else f"{agent.name}{version} × {model.name}")
        return cls(id=cid, model=model, agent=agent, label=label)


class TaskRecord(_Record):
    """A task as it was when the run used it (content digest pins the version)."""

    id: str
    suite: str | None = None
    digest: str
    tier: Literal["easy", "medium", "hard"] | None = None
    category: str | None = None
    source: str | None = None
    tags: list[str] = Field(default_factory=list)
    path: str | None = None


class RunRecord(_Record):
    id: str
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    status: Literal["running", "finished", "interrupted", "imported"] = "running"
    backend: str = "local"
    source: str = Field(default="agentmeter", description="'agentmeter' or the importer's name")
    attempts: int = 1
    concurrency: int = 1
    pricing_snapshot: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class PhaseTimings(_Record):
    """Seconds spent per trial phase; ``None`` when the phase did not run."""

    environment: float | None = None
    agent_setup: float | None = None
    agent_run: float | None = None
    verification: float | None = None
    #: the agent's and the verifier's own command time (wall time of their processes)
    agent_command: float | None = None
    verifier_command: float | None = None


class TrialRecord(_Record):
    id: str = Field(description="'{config_id}:{task_id}:{attempt}' for a run")
    run_id: str
    config_id: str
    task_id: str
    attempt: int = Field(ge=0)
    #: retries of an infra_invalid trial get a new try number; all are kept
    try_number: int = 0
    status: TrialStatus = TrialStatus.PENDING
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    passed: bool | None = None
    error: str | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float | None = None
    model_calls: int = 0
    tool_calls: dict[str, int] = Field(default_factory=dict)
    turns: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    timings: PhaseTimings = Field(default_factory=PhaseTimings)
    #: host pid of the runner that owns a running trial (stale detection on resume)
    owner_pid: int | None = None
    #: who holds the try (a cluster worker, "<host>:<node>:<pid>"); None for the local executor
    #: and after someone else closed the try. A record with an owner is saved fenced
    #: (``Store.save_trial``): refused once the try was closed or is leased to another owner.
    lease_owner: str | None = None
    #: when the owner's lease lapses unless renewed (``Store.renew_leases``); a running try
    #: past it is closed as infra_invalid (``Store.close_expired_trials``)
    lease_expires_at: datetime | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelCallRecord(_Record):
    """One model call metered by the gateway."""

    trial_id: str
    seq: int = Field(ge=0)
    wire_api: WireApi
    client_api: WireApi
    model: str = Field(description="the model name the client asked for")
    upstream_model: str
    status_code: int
    stream: bool
    started_at: datetime
    latency_s: float
    ttft_s: float | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    error: str | None = None
    scripted: bool = Field(default=False, description="served by the scripted test double")
    purpose: Literal["agent", "judge"] = Field(
        default="agent", description="who made the call: the agent, or a judge grading the trial "
        "(evaluation cost, kept apart from the agent's)")


class ArtifactRecord(_Record):
    trial_id: str
    name: str
    kind: Literal["agent_log", "transcript", "verifier_output", "fs_diff", "bodies", "screenshot",
                  "video", "other"]
    relpath: str = Field(description="path relative to the run's artifact directory")
    size: int


#: ``not_built``: the candidate never built, so no case ran for it (a candidate failure, Build = 0;
#: never a framework error)
CaseStatus = Literal["valid", "oracle_failed", "framework_error", "not_run", "not_built"]


class CaseOutcome(BaseModel):
    """One differential-test case judged (CLI-Tool-Bench): a line of a trial's
    ``difftest_cases.jsonl`` artifact, written by ``verify/difftest`` and shown by the report's
    drill-down. Extra keys are ignored (a newer writer stays readable)."""

    id: str
    cls: str
    key: str
    command: str
    status: CaseStatus
    error: str | None = None
    oracle_exit: int | None = None
    candidate_exit: int | None = None
    oracle_stdout: str = ""
    candidate_stdout: str = ""
    candidate_stderr: str = ""
    candidate_timed_out: bool = False
    oracle_fs: dict[str, str] = Field(default_factory=dict, description="path -> change type")
    candidate_fs: dict[str, str] = Field(default_factory=dict)
    exec: bool = False
    side_effects: bool = False
    em: bool = False
    fm: bool = False
    similarity: float | None = None
    judge: bool | None = None
    judge_reason: str | None = None
    sm: bool | None = None
    sm_fm: bool | None = None
    sm_nogate: bool | None = None
    #: negative cases (the oracle exited non-zero; paper §5.1's robustness): the candidate
    #: also exited non-zero, and its merged stdout+stderr fuzzy-matches the oracle's (τ = 0.8)
    error_agree: bool | None = None
    error_output_match: bool | None = None

    @property
    def needs_judge(self) -> bool:
        """Every SM variant is decided without a judge except where Exec holds and EM fails."""
        return self.status == "valid" and self.exec and not self.em

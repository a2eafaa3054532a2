"""What every importer produces: trial drafts turned into store records (configs, tasks,
trials) of one run, with ``RunRecord.source`` = the importer's name and status "imported".

Drafts carry what the source exposed and nothing more: a token count the source does not report
stays ``None`` (n/a), never zero. Attempts are numbered per (config, task) in start-time order
unless the source numbers them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentmeter.records import (
    AgentSpec,
    ConfigRecord,
    ModelSpec,
    PhaseTimings,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
    utcnow,
)
from agentmeter.store.artifacts import RUN_ID_PATTERN

TIER_NAMES = ("easy", "medium", "hard")
STATUS_NAMES = tuple(s.value for s in TrialStatus)


class ImportFormatError(ValueError):
    """Bad import input; the message names the file and, for tables, the row and column."""


@dataclass
class TrialDraft:
    """One trial try as read from a source, before ids are assigned."""

    where: str  # file (and row) it came from, for messages
    task: str
    agent: str
    model: str
    status: TrialStatus
    agent_version: str | None = None
    config_id: str | None = None  # kept when the source names it (agentmeter's own export)
    price_key: str | None = None
    label: str | None = None
    tier: str | None = None
    category: str | None = None
    tags: list[str] = field(default_factory=list)
    task_digest: str | None = None
    attempt: int | None = None
    try_number: int = 0
    reward: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    passed: bool | None = None
    error: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float | None = None
    model_calls: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    turns: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    timings: PhaseTimings = field(default_factory=PhaseTimings)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedRun:
    run: RunRecord
    configs: list[ConfigRecord]
    tasks: list[TaskRecord]
    trials: list[TrialRecord]
    notes: list[str] = field(default_factory=list)


def parse_time(value: object, where: str) -> datetime | None:
    """ISO 8601 (a trailing Z allowed) or a datetime; naive times are taken as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value
    else:
        text = str(value).strip().replace("Z", "+00:00")
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ImportFormatError(f"{where}: not an ISO 8601 time: {value!r}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def safe_run_id(text: str) -> str:
    rid = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:150]
    return rid or "import"


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise ImportFormatError(f"run id {run_id!r}: use letters, digits, '.', '_' and '-'")
    return run_id


def _digest(*parts: str) -> str:
    return "import-" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def build_run(drafts: list[TrialDraft], *, run_id: str, source: str, origin: Path,
              settings: dict[str, Any] | None = None) -> ImportedRun:
    """Configs, tasks and trials of one imported run from its drafts."""
    if not drafts:
        raise ImportFormatError(f"{origin}: no trials found")
    configs: dict[str, ConfigRecord] = {}
    draft_config: list[str] = []
    for d in drafts:
        rec = ConfigRecord.of(AgentSpec(name=d.agent, version=d.agent_version),
                            ModelSpec(name=d.model, price_key=d.price_key))
        if d.label:
            rec = rec.model_copy(update={"label": d.label})
        if d.config_id:
            rec = rec.model_copy(update={"id": d.config_id})
        prev = configs.get(rec.id)
        if prev is not None and prev.label != rec.label:
            raise ImportFormatError(f"{d.where}: configuration {rec.label!r} has the same agent "
                                    f"and model as {prev.label!r}")
        configs[rec.id] = rec
        draft_config.append(rec.id)
    tasks: dict[str, TaskRecord] = {}
    for d in drafts:
        tier = d.tier.lower() if d.tier else None
        if tier is not None and tier not in TIER_NAMES:
            raise ImportFormatError(f"{d.where}: tier {d.tier!r} is not one of easy, medium, hard")
        rec_t = TaskRecord(id=d.task, suite=None, digest=d.task_digest or _digest(source, d.task),
                           tier=tier, category=d.category, source=source,  # type: ignore[arg-type]
                           tags=sorted(set(d.tags)))
        prev_t = tasks.get(d.task)
        if prev_t is not None and (prev_t.tier, prev_t.digest) != (rec_t.tier, rec_t.digest):
            raise ImportFormatError(f"{d.where}: task {d.task!r} has a different tier or "
                                    "checksum than in an earlier trial")
        tasks[d.task] = rec_t
    # attempts: numbered per (config, task) by start time where the source does not number them
    order = sorted(range(len(drafts)), key=lambda i: (
        drafts[i].started_at or datetime.min.replace(tzinfo=UTC), drafts[i].where))
    next_attempt: dict[tuple[str, str], int] = {}
    used: set[tuple[str, str, int, int]] = set()
    trials: list[TrialRecord] = []
    for i in order:
        d, cid = drafts[i], draft_config[i]
        key = (cid, d.task)
        attempt = d.attempt
        if attempt is None:
            attempt = next_attempt.get(key, 0)
            while (cid, d.task, attempt, d.try_number) in used:
                attempt += 1
            next_attempt[key] = attempt + 1
        if (cid, d.task, attempt, d.try_number) in used:
            raise ImportFormatError(f"{d.where}: a second trial of {configs[cid].label!r} on "
                                    f"{d.task!r} with attempt {attempt} try {d.try_number}")
        used.add((cid, d.task, attempt, d.try_number))
        trials.append(TrialRecord(
            id=f"{cid}:{d.task}:{attempt}", run_id=run_id, config_id=cid, task_id=d.task,
            attempt=attempt, try_number=d.try_number, status=d.status, reward=d.reward,
            rewards=d.rewards, passed=d.passed, error=d.error, usage=d.usage,
            cost_usd=d.cost_usd, model_calls=d.model_calls, tool_calls=d.tool_calls,
            turns=d.turns, started_at=d.started_at, finished_at=d.finished_at,
            timings=d.timings, extra={"imported_from": d.where, **d.extra}))
    starts = [t.started_at for t in trials if t.started_at]
    ends = [t.finished_at for t in trials if t.finished_at]
    attempts = max((t.attempt for t in trials), default=0) + 1
    run = RunRecord(id=check_run_id(run_id), created_at=min(starts) if starts else utcnow(),
                    finished_at=max(ends) if ends else None, status="imported",
                    backend="imported", source=source, attempts=attempts,
                    settings={"imported_from": str(origin), **(settings or {})})
    return ImportedRun(run, sorted(configs.values(), key=lambda c: c.id),
                       sorted(tasks.values(), key=lambda t: t.id), trials)


def status_from_reward(passed: bool | None, failure: TrialStatus | None) -> TrialStatus:
    """A passed verdict wins; otherwise the failure status, else plain ``failed``."""
    if passed:
        return TrialStatus.PASSED
    return failure or TrialStatus.FAILED


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; errors name the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ImportFormatError(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    except RecursionError:  # results from elsewhere: a traceback for a nesting json cannot take
        raise ImportFormatError(f"{path}: JSON nested too deep to read") from None
    if not isinstance(data, dict):
        raise ImportFormatError(f"{path}: expected a JSON object")
    return data


def whole_number(obj: dict[str, Any], key: str, where: Path | str, field: str = "") -> int | None:
    """``obj[key]`` as a count (None when absent); errors name the file and field."""
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != int(v):
        name = f"{field}.{key}" if field else key
        raise ImportFormatError(f"{where}: field {name}: expected a whole number >= 0, "
                                f"got {v!r}")
    return int(v)

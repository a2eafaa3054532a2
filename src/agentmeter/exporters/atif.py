"""Export a run's trajectories in Harbor's ATIF (Agent Trajectory Interchange Format, RFC 0001).

One JSON document per final trial try, built from what the store holds:

- the steps come from the try's transcript artifact: the native agent's
  ``native-transcript.json`` (user / system / assistant / tool messages and events) or an
  installed CLI's ``trajectory.json`` (the common trajectory: message, tool_call, tool_result and
  event steps). Native tool calls keep their ids; CLI tool calls get generated ids and each
  tool result answers the oldest unanswered call of its step.
- the per-step ``metrics`` come from the gateway's model calls (the truth), attached in call order
  to the agent steps when every successful call maps to exactly one agent step (always so for
  the native agent: one assistant message per call). When they do not line up (a CLI making calls
  that leave no step), no step gets metrics: ``notes`` says so and ``extra.agentmeter.model_calls``
  lists every call's usage, so nothing is attributed to the wrong step.
- ``final_metrics`` is the trial record's usage and cost.

Agents with no transcript (``oracle``, ``nop``, imported runs) get a document with the task's
instruction as the only step (read from the task directory when it is still there) and the final
metrics. Pending and running tries are skipped. Token counts ATIF has no field for
(cache-creation, reasoning) go to ``metrics.extra`` / ``final_metrics.extra``; a count the
upstream did not report is left out, never written as zero.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmeter.importers.common import ImportFormatError
from agentmeter.records import (
    CLI_TRAJECTORY,
    NATIVE_TRANSCRIPT,
    NO_MODEL,
    ArtifactRecord,
    ConfigRecord,
    ModelCallRecord,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
)
from agentmeter.store.artifacts import artifact_file
from agentmeter.store.db import Store
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.models import task_digest
from agentmeter.tasks.suite import load_task

SCHEMA_VERSION = "ATIF-v1.4"
#: the order step fields are written in (the RFC's order)
_STEP_KEYS = ("step_id", "timestamp", "source", "message", "tool_calls", "observation", "metrics",
              "extra")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class AtifDocument:
    """One trial try's trajectory and the file name it is written under."""

    filename: str
    trial_id: str
    try_number: int
    document: dict[str, Any]


@dataclass
class AtifExport:
    documents: list[AtifDocument]
    #: (trial id, try number, status) of tries not exported (not finished)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` without ``None`` values (ATIF leaves unknown optional fields out)."""
    return {k: v for k, v in d.items() if v is not None}


def _metrics(usage: TokenUsage, cost_usd: float | None) -> dict[str, Any]:
    extra = _clean({"cache_creation_tokens": usage.cache_creation,
                    "reasoning_tokens": usage.reasoning})
    return _clean({"prompt_tokens": usage.input, "completion_tokens": usage.output,
                   "cached_tokens": usage.cache_read, "cost_usd": cost_usd,
                   "extra": extra or None})


def _arguments(value: Any) -> dict[str, Any]:
    """ATIF tool arguments are a JSON object; anything else is wrapped, never dropped."""
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


class _StepBuilder:
    """Accumulates ATIF steps; an agent step stays open for tool calls and their results."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._answered: set[str] = set()
        self._next_call = 0

    def _add(self, source: str, message: str, **fields: Any) -> dict[str, Any]:
        step = {"step_id": len(self.steps) + 1, "source": source, "message": message} | _clean(fields)
        self.steps.append(step)
        self._open = step if source == "agent" else None
        return step

    def user(self, text: str, **fields: Any) -> None:
        self._add("user", text, **fields)

    def system(self, text: str, **fields: Any) -> None:
        self._add("system", text, **fields)

    def agent(self, text: str, calls: list[dict[str, Any]], extra: dict[str, Any] | None = None
              ) -> None:
        """A complete assistant message (one model reply) with its tool calls."""
        self._add("agent", text, tool_calls=calls or None, extra=extra or None)

    def agent_text(self, text: str) -> None:
        """CLI message: continues an open agent step that has not acted yet, else starts one."""
        step = self._open
        if step is not None and "tool_calls" not in step and "observation" not in step:
            step["message"] = f"{step['message']}\n\n{text}" if step["message"] else text
        else:
            self._add("agent", text)

    def agent_tool(self, name: str, arguments: Any) -> None:
        """CLI tool call: joins the open agent step unless results already came back."""
        step = self._open
        if step is None or "observation" in step:
            step = self._add("agent", "")
        self._next_call += 1
        step.setdefault("tool_calls", []).append({
            "tool_call_id": f"call-{self._next_call}", "function_name": name,
            "arguments": _arguments(arguments)})

    def result(self, content: str, call_id: str | None = None) -> None:
        """A tool result for the open agent step (a system observation if none is open)."""
        step = self._open
        if step is None:
            step = self._add("system", "")
        ids = [c["tool_call_id"] for c in step.get("tool_calls", [])]
        if call_id is None:
            call_id = next((i for i in ids if i not in self._answered), None)
        elif call_id not in ids:
            call_id = None
        if call_id is not None:
            self._answered.add(call_id)
        step.setdefault("observation", {"results": []})["results"].append(
            _clean({"source_call_id": call_id, "content": content}))


def _text(v: Any) -> str:
    return v if isinstance(v, str) else "" if v is None else json.dumps(v, ensure_ascii=False)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ImportFormatError(f"{path}: transcript artifact is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportFormatError(f"{path}: not readable JSON: {e}") from None


def _native_steps(path: Path, b: _StepBuilder) -> None:
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ImportFormatError(f"{path}: a native transcript is a JSON list of messages")
    for i, e in enumerate(entries):
        role = e.get("role") if isinstance(e, dict) else None
        if not isinstance(e, dict) or role not in ("user", "system", "event", "assistant", "tool"):
            raise ImportFormatError(f"{path}: entry {i}: not a transcript message (role "
                                    "user, system, assistant, tool or event)")
        content = _text(e.get("content"))
        if role == "user":
            b.user(content)
        elif role == "system":
            b.system(content)
        elif role == "event":
            b.system(content, extra={"event": e.get("event")})
        elif role == "tool":
            b.result(content, e.get("tool_call_id"))
        else:
            calls, errors = [], {}
            for c in e.get("tool_calls") or []:
                if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                    raise ImportFormatError(f"{path}: entry {i}: a tool call without an id")
                calls.append({"tool_call_id": c["id"], "function_name": _text(c.get("name")),
                              "arguments": _arguments(c.get("arguments"))})
                if c.get("parse_error"):
                    errors[c["id"]] = c["parse_error"]
            b.agent(content, calls, {"tool_call_parse_errors": errors} if errors else None)


def _cli_steps(path: Path, b: _StepBuilder) -> dict[str, Any]:
    doc = _read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ImportFormatError(f"{path}: a CLI trajectory is a JSON object with a 'steps' list")
    for i, s in enumerate(doc["steps"]):
        kind = s.get("kind") if isinstance(s, dict) else None
        if kind == "message":
            b.agent_text(_text(s.get("text")))
        elif kind == "tool_call":
            b.agent_tool(_text(s.get("tool")), s.get("arguments"))
        elif kind == "tool_result":
            b.result(_text(s.get("text")))
        elif kind == "event":
            b.system(_text(s.get("text")), extra={"event": "cli"})
        elif kind != "usage":  # usage steps carry no dialogue; the gateway's calls are the truth
            raise ImportFormatError(f"{path}: steps[{i}]: unknown kind {kind!r}")
    return doc


class _Instructions:
    """Task instructions read from the run's task directories, once per task."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    def get(self, task: TaskRecord | None) -> tuple[str | None, str | None]:
        """(instruction, note): the note says why the instruction is missing or may differ."""
        if task is None or task.path is None:
            return None, "the task's instruction is not available (no task directory stored)"
        key = (task.id, task.digest)
        if key not in self._cache:
            directory = Path(task.path)
            try:
                text: str | None = load_task(directory).instruction
                note = None if task_digest(directory) == task.digest else (
                    f"the instruction was read from {directory}, which changed since the run")
            except (TaskError, OSError) as e:
                text, note = None, f"the task's instruction is not available ({e})"
            self._cache[key] = (text, note)
        return self._cache[key]


def _attach_calls(steps: list[dict[str, Any]], calls: list[ModelCallRecord], notes: list[str]
                  ) -> None:
    agent_steps = [s for s in steps if s["source"] == "agent"]
    ok = [c for c in calls if c.error is None and c.status_code < 400 and c.purpose == "agent"]
    if not ok:
        return
    if len(ok) != len(agent_steps):
        notes.append(f"{len(ok)} successful model calls do not map one-to-one onto "
                     f"{len(agent_steps)} agent steps: per-step metrics are left out; "
                     "extra.agentmeter.model_calls holds each call's usage")
        return
    for step, call in zip(agent_steps, ok, strict=True):
        step["metrics"] = _metrics(call.usage, call.cost_usd)
        step["timestamp"] = call.started_at.isoformat()
        step["extra"] = (step.get("extra") or {}) | {"model_call_seq": call.seq}
        if call.upstream_model != call.model:
            step["extra"]["upstream_model"] = call.upstream_model


def _call_row(c: ModelCallRecord) -> dict[str, Any]:
    return {"seq": c.seq, "status_code": c.status_code, "model": c.model,
            "upstream_model": c.upstream_model, "started_at": c.started_at.isoformat(),
            "usage": c.usage.model_dump(), "cost_usd": c.cost_usd, "error": c.error,
            "scripted": c.scripted, "purpose": c.purpose}


def trajectory(store: Store, run: RunRecord, trial: TrialRecord, config: ConfigRecord | None,
               task: TaskRecord | None, instructions: _Instructions | None = None
               ) -> dict[str, Any]:
    """The ATIF document of one trial try."""
    instructions = instructions or _Instructions()
    calls = store.model_calls(run.id, trial.id, trial.try_number)
    arts = {a.name: a for a in store.artifacts(run.id, trial.id, trial.try_number)
            if a.kind == "transcript"}
    b, notes = _StepBuilder(), []
    version = config.agent.version if config else None
    source: ArtifactRecord | None = arts.get(NATIVE_TRANSCRIPT) or arts.get(CLI_TRAJECTORY)
    path = None if source is None else artifact_file(store.run_dir(run.id), source.relpath)
    if source is not None and path is None:
        raise ImportFormatError(f"{source.relpath}: not inside the run's directory")
    if source is not None and path is not None and source.name == NATIVE_TRANSCRIPT:
        _native_steps(path, b)
    else:
        text, note = instructions.get(task)
        b.user(text or "", timestamp=trial.started_at.isoformat() if trial.started_at else None)
        notes += [note] if note else []
        if path is not None:
            cli = _cli_steps(path, b)
            version = version or (cli["version"] if isinstance(cli.get("version"), str) else None)
        else:
            notes.append("no transcript: the agent uses no model or none was kept; only the "
                         "instruction and the final metrics are exported")
    _attach_calls(b.steps, calls, notes)
    if any(c.scripted for c in calls):
        notes.append("the model calls were served by agentmeter's scripted test double "
                     "(scripted/*), not a real model")
    steps = [{k: s[k] for k in _STEP_KEYS if k in s} for s in b.steps]
    u = trial.usage
    final = _clean({"total_prompt_tokens": u.input, "total_completion_tokens": u.output,
                    "total_cached_tokens": u.cache_read, "total_cost_usd": trial.cost_usd,
                    "total_steps": len(steps),
                    "extra": _clean({"total_cache_creation_tokens": u.cache_creation,
                                     "total_reasoning_tokens": u.reasoning,
                                     "model_calls": trial.model_calls,
                                     "tool_calls": trial.tool_calls, "turns": trial.turns})})
    model = config.model.name if config and config.model.name != NO_MODEL else None
    meta = _clean({
        "run_id": run.id, "trial_id": trial.id, "try_number": trial.try_number,
        "attempt": trial.attempt, "config_id": trial.config_id,
        "config": config.label if config else None, "task_id": trial.task_id,
        "suite": task.suite if task else None, "tier": task.tier if task else None,
        "status": trial.status.value, "reward": trial.reward, "passed": trial.passed,
        "error": trial.error, "pricing_snapshot": run.pricing_snapshot,
        "started_at": trial.started_at.isoformat() if trial.started_at else None,
        "finished_at": trial.finished_at.isoformat() if trial.finished_at else None,
        "transcript": source.relpath if source else None,
        "model_calls": [_call_row(c) for c in calls]})
    return _clean({
        "schema_version": SCHEMA_VERSION,
        "session_id": f"{run.id}:{trial.id}:{trial.try_number}",
        "agent": _clean({"name": config.agent.name if config else "unknown",
                         "version": version or "unknown", "model_name": model}),
        "steps": steps, "notes": " ".join(notes) or None, "final_metrics": final,
        "extra": {"agentmeter": meta}})


def atif_export(store: Store, run_id: str) -> AtifExport:
    """Every finished try of a run as an ATIF document (nothing is written)."""
    run = store.require_run(run_id)
    configs = {c.id: c for c in store.run_configs(run_id)}
    tasks = {t.id: t for t in store.run_tasks(run_id)}
    instructions = _Instructions()
    out = AtifExport([])
    names: set[str] = set()
    for t in store.trials(run_id):
        if not t.status.final:
            out.skipped.append((t.id, t.try_number, t.status.value))
            continue
        name = f"{_UNSAFE.sub('_', t.id)}.try{t.try_number}.json"
        if name in names:
            raise ImportFormatError(f"two trials of run {run_id!r} map to the file name {name}")
        names.add(name)
        doc = trajectory(store, run, t, configs.get(t.config_id), tasks.get(t.task_id),
                         instructions)
        out.documents.append(AtifDocument(name, t.id, t.try_number, doc))
    return out


def write_atif(export: AtifExport, out_dir: Path) -> list[Path]:
    """Write one ``<trial>.try<N>.json`` per document into ``out_dir`` (each file atomically)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ImportFormatError(f"{out_dir}: not a directory (ATIF export writes one file per "
                                "trial try into a directory)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for d in export.documents:
        path = out_dir / d.filename
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(d.document, indent=1, ensure_ascii=False) + "\n")
        tmp.replace(path)
        written.append(path)
    return written

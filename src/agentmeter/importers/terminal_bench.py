"""Terminal-Bench v1 run directories: ``<run>/results.json`` (``BenchmarkResults``: a
``results`` list of ``TrialResults``) and ``<run>/run_metadata.json`` (``agent_name``,
``model_name``). Without a top-level results.json, the per-trial
``<run>/<task>/<trial>/results.json`` files are read.

Per trial: ``task_id``, ``trial_name`` (``<task>.<n>-of-<m>.<run>`` gives the attempt),
``is_resolved``, ``failure_mode``, ``total_input_tokens``, ``total_output_tokens`` and the
``*_started_at``/``*_ended_at`` times. Terminal-Bench records no cost and no cache split:
cost is priced later from the tokens (``agentmeter score`` / ``reprice``), cache stays n/a.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentmeter.importers.common import (
    ImportedRun,
    ImportFormatError,
    TrialDraft,
    build_run,
    parse_time,
    read_json,
    safe_run_id,
    seconds,
    whole_number,
)
from agentmeter.importers.mapping import Mapping
from agentmeter.records import PhaseTimings, TokenUsage, TrialStatus

S = TrialStatus
#: Terminal-Bench v1 ``FailureMode`` values of unresolved trials -> status
FAILURE_STATUS: dict[str, TrialStatus] = {
    "none": S.FAILED, "unset": S.FAILED, "test_timeout": S.FAILED,
    "agent_timeout": S.TIMEOUT,
    "unknown_agent_error": S.AGENT_ERROR, "fatal_llm_parse_error": S.AGENT_ERROR,
    "context_length_exceeded": S.AGENT_ERROR, "output_length_exceeded": S.AGENT_ERROR,
    "parse_error": S.INFRA_INVALID, "unknown": S.INFRA_INVALID,
    "agent_installation_failed": S.INFRA_INVALID,
}
_ATTEMPT = re.compile(r"\.(\d+)-of-(\d+)\.")


def looks_like_terminal_bench(path: Path) -> bool:
    if path.is_file():
        return path.name == "results.json"
    return (path / "results.json").is_file() or (path / "run_metadata.json").is_file()


def _trials(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any], Path]:
    run_dir = path.parent if path.is_file() else path
    meta_file = run_dir / "run_metadata.json"
    meta = read_json(meta_file) if meta_file.is_file() else {}
    top = path if path.is_file() else run_dir / "results.json"
    out: list[tuple[str, dict[str, Any]]] = []
    if top.is_file():
        results = read_json(top).get("results")
        if not isinstance(results, list):
            raise ImportFormatError(f"{top}: field results: expected a list of trials")
        for i, r in enumerate(results):
            if not isinstance(r, dict):
                raise ImportFormatError(f"{top}: field results[{i}]: expected an object")
            out.append((f"{top}: results[{i}]", r))
    else:
        for f in sorted(run_dir.glob("*/*/results.json")):
            out.append((str(f), read_json(f)))
    if not out:
        raise ImportFormatError(f"{run_dir}: no Terminal-Bench trials (no results.json)")
    return out, meta, run_dir


def _draft(where: str, r: dict[str, Any], meta: dict[str, Any], mapping: Mapping) -> TrialDraft:
    task = r.get("task_id")
    if not isinstance(task, str) or not task:
        raise ImportFormatError(f"{where}: field task_id: missing or not a string")
    agent = meta.get("agent_name") or mapping.defaults.get("agent")
    model = meta.get("model_name") or mapping.defaults.get("model")
    if not agent:
        raise ImportFormatError(f"{where}: no agent name (run_metadata.json agent_name, or "
                                "[defaults] agent in a mapping file)")
    resolved = r.get("is_resolved")
    if resolved is not None and not isinstance(resolved, bool):
        raise ImportFormatError(f"{where}: field is_resolved: expected true/false/null")
    mode = str(r.get("failure_mode") or "unset").lower()
    if resolved:
        status = S.PASSED
    elif mode in mapping.failure_modes:
        status = TrialStatus(mapping.failure_modes[mode])
    elif mode in FAILURE_STATUS:
        status = FAILURE_STATUS[mode]
        if resolved is None and status is S.FAILED:
            status = S.INFRA_INVALID  # never evaluated and no failure recorded
    else:
        raise ImportFormatError(f"{where}: field failure_mode: unknown value {mode!r} (map it "
                                "in [failure_modes] of a mapping file)")
    passed = None if status is S.INFRA_INVALID else status is S.PASSED
    name = str(r.get("trial_name") or "")
    m = _ATTEMPT.search(name + ".")
    t = {k: parse_time(r.get(k), f"{where}: field {k}")
         for k in ("trial_started_at", "trial_ended_at", "agent_started_at", "agent_ended_at",
                   "test_started_at", "test_ended_at")}
    parser = r.get("parser_results") or {}
    commands = whole_number(r, "n_commands", where)
    return TrialDraft(
        where=where, task=task, agent=str(agent), model=str(model or "unknown"),
        price_key=str(model) if model else None, status=status, tier=mapping.tiers.get(task),
        attempt=int(m.group(1)) - 1 if m else None, passed=passed,
        reward=None if passed is None else float(passed),
        error=None if status in (S.PASSED, S.FAILED) else f"failure_mode {mode}",
        usage=TokenUsage(input=whole_number(r, "total_input_tokens", where),
                         output=whole_number(r, "total_output_tokens", where)),
        tool_calls={"command": commands} if commands else {},
        started_at=t["trial_started_at"], finished_at=t["trial_ended_at"],
        timings=PhaseTimings(agent_run=seconds(t["agent_started_at"], t["agent_ended_at"]),
                             verification=seconds(t["test_started_at"], t["test_ended_at"])),
        extra={"tb_trial": name, "failure_mode": mode,
               "parser_results": parser if isinstance(parser, dict) else {}})


def import_terminal_bench(path: Path, mapping: Mapping | None = None,
                          run_id: str | None = None) -> ImportedRun:
    mapping = mapping or Mapping()
    trials, meta, run_dir = _trials(path)
    drafts = [_draft(w, r, meta, mapping) for w, r in trials]
    rid = run_id or safe_run_id(f"tb-{meta.get('run_id') or run_dir.resolve().name}")
    return build_run(drafts, run_id=rid, source=mapping.source or "terminal-bench",
                     origin=path, settings={"format": "terminal-bench", "mapping": mapping.path,
                                            "dataset": meta.get("dataset_name")})

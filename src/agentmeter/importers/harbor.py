"""Harbor job directories: ``<job>/<trial>/result.json`` (Harbor's ``TrialResult``).

Fields read per trial: ``task_name``, ``task_checksum``, ``agent_info`` (name, version,
``model_info`` {name, provider}), ``agent_result`` (``n_input_tokens`` incl. cached,
``n_cache_tokens`` = cache reads, ``n_output_tokens``, ``cost_usd``), ``verifier_result.rewards``,
``exception_info`` (``exception_type``, ``exception_message``), ``started_at``/``finished_at`` and
the phase timings ``environment_setup``/``agent_setup``/``agent_execution``/``verifier``.
A trial whose agent never started (no ``agent_result``, no ``agent_execution``) spent zero
tokens and zero USD; otherwise a figure Harbor leaves null stays n/a.

Status: a reward at or above the pass threshold is ``passed``; otherwise the exception decides
(:data:`EXCEPTION_STATUS`, then name patterns; a mapping file's ``[exceptions]`` overrides),
and a trial without exception or verifier result is ``infra_invalid``. Harbor does not expose
cache-creation tokens, so they stay n/a.
"""

from __future__ import annotations

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
EXCEPTION_STATUS: dict[str, TrialStatus] = {
    "AgentTimeoutError": S.TIMEOUT,
    "AgentSetupTimeoutError": S.INFRA_INVALID,
    "EnvironmentStartTimeoutError": S.INFRA_INVALID,
    "EnvironmentBuildError": S.INFRA_INVALID,
    "VerifierTimeoutError": S.INFRA_INVALID,
    "RewardFileNotFoundError": S.INFRA_INVALID,
    "RewardFileEmptyError": S.INFRA_INVALID,
    "VerifierOutputParseError": S.INFRA_INVALID,
    "DownloadVerifierDirError": S.INFRA_INVALID,
    "AddTestsDirError": S.INFRA_INVALID,
    "CancelledError": S.INFRA_INVALID,
    "ContextLengthExceededError": S.AGENT_ERROR,
    "OutputLengthExceededError": S.AGENT_ERROR,
    "NonZeroAgentExitCodeError": S.AGENT_ERROR,
}
#: name fragments of harness-side failures (not the configuration's fault)
_INFRA_HINTS = ("Environment", "Verifier", "Reward", "Docker", "Daytona", "Modal", "E2B",
                "Runloop", "Upload", "Download", "Sandbox", "Container")
_BUDGET_HINTS = ("Budget", "CostLimit", "CostExceeded")


def exception_status(name: str, mapping: Mapping) -> TrialStatus:
    if name in mapping.exceptions:
        return TrialStatus(mapping.exceptions[name])
    if name in EXCEPTION_STATUS:
        return EXCEPTION_STATUS[name]
    if any(h in name for h in _BUDGET_HINTS):
        return S.BUDGET_EXCEEDED
    if "Timeout" in name and "Agent" in name:
        return S.TIMEOUT
    if any(h in name for h in _INFRA_HINTS):
        return S.INFRA_INVALID
    return S.AGENT_ERROR


def _is_trial_result(path: Path) -> bool:
    try:
        return "task_name" in read_json(path)
    except ImportFormatError:
        return True  # let the import report it


def trial_results(path: Path) -> list[Path]:
    """result.json files of a trial dir, a job dir, or a directory of job dirs."""
    own = path / "result.json"
    if own.is_file() and _is_trial_result(own):
        return [own]
    found = sorted(p for p in path.glob("*/result.json") if _is_trial_result(p))
    if not found:
        found = sorted(p for p in path.glob("*/*/result.json") if _is_trial_result(p))
    return found


def looks_like_harbor(path: Path) -> bool:
    return path.is_dir() and bool(trial_results(path))


def _obj(data: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ImportFormatError(f"{where}: field {key}: expected an object")
    return value


def _phase(data: dict[str, Any], key: str, where: Path) -> float | None:
    t = _obj(data, key, where)
    return seconds(parse_time(t.get("started_at"), f"{where}: field {key}.started_at"),
                   parse_time(t.get("finished_at"), f"{where}: field {key}.finished_at"))


def _reward(rewards: dict[str, Any], where: Path) -> float | None:
    if not rewards:
        return None
    for k, v in rewards.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ImportFormatError(f"{where}: field verifier_result.rewards.{k}: expected a "
                                    f"number, got {v!r}")
    if "reward" in rewards:
        return float(rewards["reward"])
    return float(sum(rewards.values()) / len(rewards))


def _draft(path: Path, mapping: Mapping) -> TrialDraft:
    data = read_json(path)
    task = data.get("task_name")
    if not isinstance(task, str) or not task:
        raise ImportFormatError(f"{path}: field task_name: missing or not a string")
    info = _obj(data, "agent_info", path)
    model_info = _obj(info, "model_info", path)
    cfg_agent = _obj(_obj(data, "config", path), "agent", path)
    agent = info.get("name") or cfg_agent.get("name") or mapping.defaults.get("agent")
    if not agent:
        raise ImportFormatError(f"{path}: field agent_info.name: missing (give [defaults] agent "
                                "in a mapping file)")
    if model_info.get("name"):
        provider = model_info.get("provider")
        model = f"{provider}/{model_info['name']}" if provider else str(model_info["name"])
    else:
        model = str(cfg_agent.get("model_name") or mapping.defaults.get("model") or "none")
    res = _obj(data, "agent_result", path)
    rewards = _obj(_obj(data, "verifier_result", path), "rewards", path)
    reward = _reward(rewards, path)
    exc = _obj(data, "exception_info", path)
    exc_type = str(exc.get("exception_type") or "") if exc else ""
    passed = None if reward is None else reward >= mapping.pass_threshold
    if passed:
        status = S.PASSED
    elif exc_type:
        status = exception_status(exc_type, mapping)
    elif reward is None:
        status = S.INFRA_INVALID
    else:
        status = S.FAILED
    if status is S.INFRA_INVALID:
        passed = None
    error = None
    if exc_type:
        error = f"{exc_type}: {exc.get('exception_message') or ''}".strip()
    elif reward is None:
        error = "no verifier result"
    never_ran = not res and data.get("agent_execution") is None
    cost = 0.0 if never_ran else res.get("cost_usd")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)
                             or cost < 0):
        raise ImportFormatError(f"{path}: field agent_result.cost_usd: expected a number >= 0, "
                                f"got {cost!r}")
    return TrialDraft(
        where=str(path), task=task, agent=str(agent), agent_version=info.get("version"),
        model=model, price_key=None if model == "none" else model, status=status,
        tier=mapping.tiers.get(task), task_digest=data.get("task_checksum"), reward=reward,
        rewards={k: float(v) for k, v in rewards.items()}, passed=passed, error=error,
        # the agent never started (e.g. the environment failed): it spent nothing
        usage=TokenUsage(input=0, output=0) if never_ran else TokenUsage(
            input=whole_number(res, "n_input_tokens", path, "agent_result"),
            output=whole_number(res, "n_output_tokens", path, "agent_result"),
            cache_read=whole_number(res, "n_cache_tokens", path, "agent_result")),
        cost_usd=None if cost is None else float(cost),
        started_at=parse_time(data.get("started_at"), f"{path}: field started_at"),
        finished_at=parse_time(data.get("finished_at"), f"{path}: field finished_at"),
        timings=PhaseTimings(environment=_phase(data, "environment_setup", path),
                             agent_setup=_phase(data, "agent_setup", path),
                             agent_run=_phase(data, "agent_execution", path),
                             verification=_phase(data, "verifier", path)),
        extra={"harbor_trial": data.get("trial_name"), "harbor_id": data.get("id")})


def import_harbor(path: Path, mapping: Mapping | None = None,
                  run_id: str | None = None) -> ImportedRun:
    mapping = mapping or Mapping()
    if not path.is_dir():
        raise ImportFormatError(f"{path}: a Harbor job must be a directory")
    files = trial_results(path)
    if not files:
        raise ImportFormatError(f"{path}: no Harbor trial (no <trial>/result.json with a "
                                "task_name)")
    drafts = [_draft(f, mapping) for f in files]
    return build_run(drafts, run_id=run_id or safe_run_id(f"harbor-{path.resolve().name}"),
                     source=mapping.source or "harbor", origin=path,
                     settings={"format": "harbor", "mapping": mapping.path})

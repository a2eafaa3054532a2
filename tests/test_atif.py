"""``agentmeter export RUN --format atif``: real trials (native agent, an installed CLI, the oracle)
run in real sandboxes against the scripted model, exported to Harbor's ATIF and checked against the
structure of Harbor's ATIF models (RFC 0001, ``harbor.models.trajectories``): required and allowed
keys of every object, sequential step ids, agent-only step fields, tool-result references; and
against the store: tool calls as in the transcript, per-step token metrics summing to the trial's
stored usage."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_agents_cli import _install
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.exporters.atif import SCHEMA_VERSION, atif_export
from agentmeter.records import TrialRecord, TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.local import LocalBackend
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_suites

TASK = "log-level-counts"
runner = CliRunner()

# --- the ATIF structure, as Harbor's pydantic models define it (all models forbid extra keys) ---
SCHEMA_VERSIONS = {f"ATIF-v1.{n}" for n in range(8)}
ROOT_REQUIRED = {"schema_version", "session_id", "agent", "steps"}
ROOT_ALLOWED = ROOT_REQUIRED | {"notes", "final_metrics", "continued_trajectory_ref", "extra"}
AGENT_REQUIRED = {"name", "version"}
AGENT_ALLOWED = AGENT_REQUIRED | {"model_name", "extra"}
STEP_REQUIRED = {"step_id", "source", "message"}
STEP_ALLOWED = STEP_REQUIRED | {"timestamp", "model_name", "reasoning_effort", "reasoning_content",
                                "tool_calls", "observation", "metrics", "extra"}
#: Step.validate_agent_only_fields
AGENT_ONLY = {"model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"}
TOOL_CALL_KEYS = {"tool_call_id", "function_name", "arguments"}  # all required
OBSERVATION_KEYS = {"results"}
RESULT_ALLOWED = {"source_call_id", "content", "subagent_trajectory_ref"}
METRICS_ALLOWED = {"prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd",
                   "prompt_token_ids", "completion_token_ids", "logprobs", "extra"}
FINAL_ALLOWED = {"total_prompt_tokens", "total_completion_tokens", "total_cached_tokens",
                 "total_cost_usd", "total_steps", "extra"}


def _keys(obj: Any, required: set[str], allowed: set[str], where: str) -> None:
    assert isinstance(obj, dict), where
    assert required <= obj.keys(), (where, required - obj.keys())
    assert obj.keys() <= allowed, (where, obj.keys() - allowed)


def validate_atif(doc: dict[str, Any]) -> None:
    """Harbor's Trajectory/Step/ToolCall/Observation/Metrics/FinalMetrics constraints."""
    _keys(doc, ROOT_REQUIRED, ROOT_ALLOWED, "root")
    assert doc["schema_version"] in SCHEMA_VERSIONS
    assert isinstance(doc["session_id"], str) and doc["session_id"]
    _keys(doc["agent"], AGENT_REQUIRED, AGENT_ALLOWED, "agent")
    assert all(isinstance(doc["agent"][k], str) for k in AGENT_REQUIRED)
    steps = doc["steps"]
    assert isinstance(steps, list) and len(steps) >= 1
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        _keys(step, STEP_REQUIRED, STEP_ALLOWED, where)
        assert step["step_id"] == i + 1, where  # Trajectory.validate_step_ids
        assert step["source"] in ("system", "user", "agent"), where
        assert isinstance(step["message"], str), where
        if step["source"] != "agent":
            assert not (AGENT_ONLY & step.keys()), (where, AGENT_ONLY & step.keys())
        if "timestamp" in step:
            datetime.fromisoformat(step["timestamp"].replace("Z", "+00:00"))
        ids = set()
        for call in step.get("tool_calls", []):
            _keys(call, TOOL_CALL_KEYS, TOOL_CALL_KEYS, f"{where}.tool_calls")
            assert isinstance(call["tool_call_id"], str) and isinstance(call["function_name"], str)
            assert isinstance(call["arguments"], dict)
            ids.add(call["tool_call_id"])
        if "observation" in step:
            _keys(step["observation"], OBSERVATION_KEYS, OBSERVATION_KEYS, f"{where}.observation")
            for r in step["observation"]["results"]:
                _keys(r, set(), RESULT_ALLOWED, f"{where}.observation.results")
                if r.get("source_call_id") is not None:  # Trajectory.validate_tool_call_references
                    assert r["source_call_id"] in ids, where
        if "metrics" in step:
            _keys(step["metrics"], set(), METRICS_ALLOWED, f"{where}.metrics")
            for k in ("prompt_tokens", "completion_tokens", "cached_tokens"):
                assert isinstance(step["metrics"].get(k, 0), int)
    if "final_metrics" in doc:
        _keys(doc["final_metrics"], set(), FINAL_ALLOWED, "final_metrics")


# --- real runs ---------------------------------------------------------------------------------

def _run(store_dir: Path, agents: list[str]) -> str:
    store = Store.open(store_dir)
    req = RunRequest(suites=["starter"], task_ids=[TASK], agents=agents,
                     models=["scripted/solver"], max_infra_retries=0)
    rid, _ = asyncio.run(run(store, prepare(req)))
    store.close()
    return rid


@pytest.fixture(scope="module")
def native_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real run: native × scripted/solver and the oracle on one starter task."""
    d = tmp_path_factory.mktemp("atif-native")
    return d, _run(d, ["native", "oracle"])


def _copy(src: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    dst = tmp_path / "store"
    shutil.copytree(src[0], dst)
    return dst, src[1]


def _trials(store: Store, rid: str) -> dict[str, TrialRecord]:
    names = {c.id: c.agent.name for c in store.run_configs(rid)}
    return {names[t.config_id]: t for t in store.trials(rid)}


def _export(store_dir: Path, rid: str, out: Path) -> tuple[int, str]:
    r = runner.invoke(app, ["export", rid, "--format", "atif", "-o", str(out),
                            "--store", str(store_dir)])
    return r.exit_code, (r.stdout + r.stderr).replace("\n", "")  # rich wraps long paths


def _docs(out: Path) -> dict[str, dict[str, Any]]:
    """Exported documents by agent name."""
    docs = {}
    for f in sorted(out.glob("*.json")):
        d = json.loads(f.read_text())
        docs[d["agent"]["name"]] = d
    return docs


def _assert_metrics_match_store(doc: dict[str, Any], trial: TrialRecord, store: Store, rid: str
                                ) -> None:
    agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
    calls = store.model_calls(rid, trial.id, trial.try_number)
    assert len(agent_steps) == len(calls) == trial.model_calls >= 2
    for step, call in zip(agent_steps, calls, strict=True):
        assert step["extra"]["model_call_seq"] == call.seq
        assert step["metrics"]["prompt_tokens"] == call.usage.input
    u = trial.usage
    assert sum(s["metrics"]["prompt_tokens"] for s in agent_steps) == u.input
    assert sum(s["metrics"]["completion_tokens"] for s in agent_steps) == u.output
    assert sum(s["metrics"]["cached_tokens"] for s in agent_steps) == u.cache_read
    assert trial.cost_usd is not None
    assert math.isclose(sum(s["metrics"]["cost_usd"] for s in agent_steps), trial.cost_usd)
    fm = doc["final_metrics"]
    assert (fm["total_prompt_tokens"], fm["total_completion_tokens"], fm["total_cached_tokens"]) \
        == (u.input, u.output, u.cache_read)
    assert fm["total_cost_usd"] == trial.cost_usd and fm["total_steps"] == len(doc["steps"])
    called: dict[str, int] = {}
    for s in agent_steps:
        for c in s.get("tool_calls", []):
            called[c["function_name"]] = called.get(c["function_name"], 0) + 1
    assert called == trial.tool_calls


def test_native_and_oracle_trials_export_as_valid_atif(native_run: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    store_dir, rid = native_run
    out = tmp_path / "atif"
    code, text = _export(store_dir, rid, out)
    assert code == 0, text
    assert "2 ATIF trajectories written" in text
    docs = _docs(out)
    assert set(docs) == {"native", "oracle"}
    for d in docs.values():
        validate_atif(d)
        assert d["schema_version"] == SCHEMA_VERSION
    store = Store.open(store_dir)
    trials = _trials(store, rid)
    native, oracle = docs["native"], docs["oracle"]
    t = trials["native"]
    assert t.status is TrialStatus.PASSED, t.error
    assert native["session_id"] == f"{rid}:{t.id}:0"
    assert native["agent"]["model_name"] == "scripted/solver"
    assert native["extra"]["agentmeter"]["trial_id"] == t.id
    assert "scripted test double" in native["notes"]
    _assert_metrics_match_store(native, t, store, rid)

    # steps mirror the native transcript: every message, tool call ids and arguments kept
    art = next(a for a in store.artifacts(rid, t.id, 0) if a.name == "native-transcript.json")
    transcript = json.loads((store.run_dir(rid) / art.relpath).read_text())
    # every message but the tool results (they are observations of their agent step) is a step
    assert [s["source"] for s in native["steps"]] == [
        {"assistant": "agent"}.get(m["role"], m["role"]) for m in transcript if m["role"] != "tool"]
    instruction = load_suites(["starter"]).task(TASK).instruction
    assert native["steps"][0] == {"step_id": 1, "source": "user", "message": instruction}
    expected = [(c["id"], c["name"], c["arguments"]) for m in transcript if m["role"] == "assistant"
                for c in m.get("tool_calls", [])]
    got = [(c["tool_call_id"], c["function_name"], c["arguments"]) for s in native["steps"]
           for c in s.get("tool_calls", [])]
    assert got == expected and got
    results = {r["source_call_id"]: r["content"] for s in native["steps"]
               for r in s.get("observation", {}).get("results", [])}
    assert results == {m["tool_call_id"]: m["content"] for m in transcript if m["role"] == "tool"}
    assert "189" in results[expected[0][0]]  # the scripted solver's real shell output

    # the oracle has no transcript and no model: the instruction and the final metrics only
    assert oracle["steps"] == [{"step_id": 1, "timestamp": oracle["steps"][0]["timestamp"],
                                "source": "user", "message": instruction}]
    assert "model_name" not in oracle["agent"]
    assert "no transcript" in oracle["notes"]
    assert oracle["final_metrics"]["total_steps"] == 1
    assert "total_prompt_tokens" not in oracle["final_metrics"]  # not reported, never zero


async def test_installed_cli_trajectory_exports_as_valid_atif(tmp_path: Path,
                                                              local_backend: LocalBackend) -> None:
    await _install(local_backend, "claude-code", [TASK])
    store = Store.open(tmp_path)
    req = RunRequest(suites=["starter"], task_ids=[TASK], agents=["claude-code"],
                     models=["scripted/solver"], max_infra_retries=0)
    rid, _ = await run(store, prepare(req))
    t = _trials(store, rid)["claude-code"]
    assert t.status is TrialStatus.PASSED, t.error
    (doc,) = [d.document for d in atif_export(store, rid).documents]
    validate_atif(doc)
    art = next(a for a in store.artifacts(rid, t.id, 0) if a.name == "trajectory.json")
    traj = json.loads((store.run_dir(rid) / art.relpath).read_text())
    assert doc["agent"] == {"name": "claude-code", "version": traj["version"],
                            "model_name": "scripted/solver"}
    steps = doc["steps"]
    assert steps[0]["source"] == "user" and "level_counts.txt" in steps[0]["message"]
    # tool_call + tool_result, then the final message: two agent steps, one per model call
    first, last = steps[1], steps[-1]
    assert [c["function_name"] for c in first["tool_calls"]] == ["Bash"]
    assert first["observation"]["results"][0]["source_call_id"] == first["tool_calls"][0][
        "tool_call_id"]
    assert "189" in first["observation"]["results"][0]["content"]
    assert last["message"] == traj["final_message"] and "tool_calls" not in last
    _assert_metrics_match_store(doc, t, store, rid)
    # cache writes have no ATIF field: they go to extra, summing to the stored usage
    assert sum(s["metrics"].get("extra", {}).get("cache_creation_tokens", 0)
               for s in steps if s["source"] == "agent") == t.usage.cache_creation
    assert doc["final_metrics"]["extra"]["total_cache_creation_tokens"] == t.usage.cache_creation


def test_calls_not_lining_up_with_steps_leave_step_metrics_out(native_run: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    """A transcript that lost its last assistant message (the real file, cut on disk): the calls
    no longer map one-to-one onto agent steps, so no step is credited with another's tokens."""
    store_dir, rid = _copy(native_run, tmp_path)
    store = Store.open(store_dir)
    t = _trials(store, rid)["native"]
    art = next(a for a in store.artifacts(rid, t.id, 0) if a.name == "native-transcript.json")
    path = store.run_dir(rid) / art.relpath
    transcript = json.loads(path.read_text())
    assert transcript[-1]["role"] == "assistant"
    path.write_text(json.dumps(transcript[:-1]))
    doc = next(d.document for d in atif_export(store, rid).documents if d.trial_id == t.id)
    validate_atif(doc)
    assert not any("metrics" in s for s in doc["steps"])
    assert "do not map one-to-one" in doc["notes"]
    calls = doc["extra"]["agentmeter"]["model_calls"]
    assert sum(c["usage"]["input"] for c in calls) == t.usage.input
    assert doc["final_metrics"]["total_prompt_tokens"] == t.usage.input


def test_bad_input_is_one_clear_message_and_nothing_is_written(native_run: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    store_dir, rid = _copy(native_run, tmp_path)
    out = tmp_path / "atif"
    r = runner.invoke(app, ["export", rid, "--format", "atif", "--store", str(store_dir)])
    assert r.exit_code != 0 and "-o DIR" in r.stderr
    code, text = _export(store_dir, "no-such-run", out)
    assert code != 0 and "no-such-run" in text
    store = Store.open(store_dir)
    t = _trials(store, rid)["native"]
    art = next(a for a in store.artifacts(rid, t.id, 0) if a.name == "native-transcript.json")
    (store.run_dir(rid) / art.relpath).write_text('[{"role": "assistant", "tool_calls": [{}]}')
    code, text = _export(store_dir, rid, out)
    assert code != 0 and "native-transcript.json" in text and "JSON" in text, text
    assert not out.exists() or not any(out.iterdir())
    (store.run_dir(rid) / art.relpath).write_text('[{"role": "narrator", "content": "hi"}]')
    code, text = _export(store_dir, rid, out)
    assert code != 0 and "entry 0" in text, text
    assert not out.exists() or not any(out.iterdir())


def test_unfinished_tries_are_skipped_and_said_so(native_run: tuple[Path, str],
                                                  tmp_path: Path) -> None:
    store_dir, rid = _copy(native_run, tmp_path)
    store = Store.open(store_dir)
    t = _trials(store, rid)["native"]
    store.save_trial(t.model_copy(update={"try_number": 1, "status": TrialStatus.RUNNING}))
    out = tmp_path / "atif"
    code, text = _export(store_dir, rid, out)
    assert code == 0, text
    assert "2 ATIF trajectories written" in text and "skipped 1 unfinished" in text
    assert sorted(p.name for p in out.iterdir()) == sorted(
        d.filename for d in atif_export(store, rid).documents)
    assert len(list(out.iterdir())) == 2

"""The run loop end to end on real sandboxes: statuses, artifacts, resume after SIGKILL, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import completed_trials, eventually
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, RunSetupError, prepare, run
from agentmeter.store.db import Store

FIXTURES = Path(__file__).parent / "fixtures"


async def _run(store: Store, req: RunRequest, run_id: str | None = None) -> str:
    rid, _ = await run(store, prepare(req), run_id)
    return rid


@pytest.mark.slow
async def test_starter_suite_oracle_nop_and_native_with_scripted_policies(tmp_path: Path) -> None:
    """The starter suite's core subset (one task per category): each task is valid (oracle
    passes, nop fails), and the native agent passes each with scripted/solver and none with
    scripted/quitter. All 24 tasks are checked the same way by CI's fresh install
    (.ci/fresh-install runs the demo, which runs the whole suite, and checks these outcomes).
    Every oracle and nop trial also records its timings and artifacts: the verifier's log and
    the workspace diff, which the oracle's changes fill, and the oracle's own log."""
    store = Store.open(tmp_path)
    req = RunRequest(suites=["starter"], subset="core", agents=["oracle", "nop", "native"],
                     models=["scripted/solver", "scripted/quitter"], concurrency=2)
    rid = await _run(store, req)
    labels = {c.id: c.label for c in store.run_configs(rid)}
    passed: dict[str, int] = {}
    for t in store.latest_completed_trials(rid):
        assert t.status in (TrialStatus.PASSED, TrialStatus.FAILED), (labels[t.config_id], t.id, t.error)
        passed[labels[t.config_id]] = passed.get(labels[t.config_id], 0) + (t.status is TrialStatus.PASSED)
        if labels[t.config_id] in ("oracle", "nop"):
            assert t.timings.environment is not None and t.timings.verification is not None
            arts = {a.name: a.relpath for a in store.artifacts(rid, t.id)}
            assert {"verifier.log", "fs_diff.json"} <= set(arts), arts
            if labels[t.config_id] == "oracle":
                assert "oracle.log" in arts
                diff = json.loads((store.run_dir(rid) / arts["fs_diff.json"]).read_text())
                assert diff["created"] or diff["modified"]
        if labels[t.config_id].startswith("native"):
            assert t.model_calls >= 1 and t.usage.input and t.usage.output and t.cost_usd
            traj = t.extra["trajectory"]
            assert traj["tool_calls_total"] == sum(t.tool_calls.values())
            assert traj["repeated_reads"] == traj["files_read"] - traj["distinct_files_read"] >= 0
            assert len(store.model_calls(rid, t.id)) == t.model_calls
    assert passed == {"oracle": 6, "nop": 0, "native × scripted/solver": 6,
                      "native × scripted/quitter": 0}
    assert store.get_run(rid).status == "finished"  # type: ignore[union-attr]


async def test_harbor_and_terminal_bench_fixtures_pass_with_oracle(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    req = RunRequest(suites=[str(FIXTURES / "harbor-task"), str(FIXTURES / "tb-task")],
                     agents=["oracle", "nop"])
    rid = await _run(store, req)
    configs = {c.id: c.agent.name for c in store.run_configs(rid)}
    result = {(configs[t.config_id], t.task_id): t.status for t in store.latest_completed_trials(rid)}
    assert result == {("oracle", "harbor-task"): TrialStatus.PASSED,
                      ("oracle", "tb-task"): TrialStatus.PASSED,
                      ("nop", "harbor-task"): TrialStatus.FAILED,
                      ("nop", "tb-task"): TrialStatus.FAILED}
    # the TB script's downloads (curl | sh, uv venv, uv pip install) met the offline toolkit
    tb = next(t for t in store.latest_completed_trials(rid)
              if t.task_id == "tb-task" and configs[t.config_id] == "oracle")
    log = next(a for a in store.artifacts(rid, tb.id) if a.name == "verifier.log")
    text = (store.run_dir(rid) / log.relpath).read_text()
    assert "curl is offline during verification" in text and "'uv pip' skipped" in text
    assert "passed" in text


@pytest.mark.docker
async def test_fixtures_pass_with_oracle_on_docker(tmp_path: Path, docker_daemon: object) -> None:
    store = Store.open(tmp_path)
    req = RunRequest(suites=[str(FIXTURES / "harbor-task"), str(FIXTURES / "tb-task")],
                     task_ids=[], agents=["oracle"], backend="docker")
    rid = await _run(store, req)
    trials = store.latest_completed_trials(rid)
    assert {t.task_id: t.status for t in trials} == {"harbor-task": TrialStatus.PASSED,
                                                     "tb-task": TrialStatus.PASSED}, \
        [t.error for t in trials]


async def test_status_taxonomy(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "slow", solve="sleep 30; echo done > /app/done", agent_timeout=1.0)
    make_task(suite, "crashing", solve="exit 3")
    make_task(suite, "no-reward", test="#!/bin/bash\necho forgot the reward\n")
    make_task(suite, "bad-build", dockerfile="FROM debian:trixie\nRUN echo broken-step && exit 9\n")
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(suite)], agents=["oracle"], max_infra_retries=1))
    by_task = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert by_task["slow"].status is TrialStatus.TIMEOUT
    assert by_task["crashing"].status is TrialStatus.FAILED  # verified, reward 0
    assert by_task["no-reward"].status is TrialStatus.FAILED
    assert "neither" in (by_task["no-reward"].error or "")
    bad = by_task["bad-build"]
    assert bad.status is TrialStatus.INFRA_INVALID
    assert "Dockerfile:2" in (bad.error or "") and "broken-step" in (bad.error or "")
    # a build failure is not retried: rebuilding would fail the same way
    assert [t.try_number for t in store.trials(rid) if t.task_id == "bad-build"] == [0]


async def test_pass_threshold_is_the_tasks(tmp_path: Path) -> None:
    """``passed`` follows the task's pass threshold: reward 0.6 passes at 0.5, fails at 1.0."""
    suite = tmp_path / "suite"
    for name in ("lenient", "strict"):
        make_task(suite, name, test="#!/bin/bash\necho 0.6 > /logs/verifier/reward.txt\n")
    toml = suite / "lenient" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", "[verifier]\npass_threshold = 0.5\n"))
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(suite)], agents=["oracle"]))
    by_task = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert by_task["lenient"].reward == by_task["strict"].reward == 0.6
    assert by_task["lenient"].passed and by_task["lenient"].status is TrialStatus.PASSED
    assert not by_task["strict"].passed and by_task["strict"].status is TrialStatus.FAILED
    assert by_task["strict"].error is None  # a reward below the threshold is no problem


@pytest.mark.parametrize(("problem", "match"), [
    ("unknown-agent", "unknown agent 'nosuch'"),
    ("bad-task", "task.toml"),
    ("unknown-task", "unknown task ids"),
    ("needs-model", "needs a model"),
    ("unknown-model", "unknown model 'nosuch/x'"),
    ("missing-suite", "no-such-suite"),
])
def test_bad_input_fails_before_anything_is_written(tmp_path: Path, problem: str, match: str) -> None:
    from typer.testing import CliRunner

    from agentmeter.cli import app

    suite = tmp_path / "suite"
    make_task(suite, "ok")
    args = ["run", "--suite", str(suite), "--store", str(tmp_path / "runs")]
    if problem == "unknown-agent":
        args += ["-a", "nosuch"]
    elif problem == "bad-task":  # refused with --strict (else skipped: test_harbor_contract.py)
        bad = make_task(suite, "bad")
        (bad / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = "soon"\nbogus = 1\n')
        args.append("--strict")
    elif problem == "unknown-task":
        args += ["-t", "ghost"]
    elif problem == "needs-model":
        args += ["-a", "native"]
    elif problem == "unknown-model":
        args += ["-a", "native", "-m", "nosuch/x"]
    elif problem == "missing-suite":
        args[2] = str(tmp_path / "no-such-suite")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert match in " ".join(res.output.split()), res.output  # one message, rich may wrap it
    assert not (tmp_path / "runs").exists()  # nothing written, not even an empty store


def test_sigkill_mid_run_then_resume_runs_every_trial_exactly_once(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for i in range(8):
        make_task(suite, f"t{i}", solve="sleep 0.6; echo done > /app/done")
    runs = tmp_path / "runs"
    run_id = "killed-run"
    cmd = [sys.executable, "-m", "agentmeter.cli", "run", "--suite", str(suite), "-a", "oracle",
           "-a", "nop", "--concurrency", "2", "--run-id", run_id, "--store", str(runs)]
    log = tmp_path / "runner.log"
    with log.open("w") as err_out:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_out)
    deadline = time.monotonic() + 120
    while completed_trials(runs, run_id) < 4 and time.monotonic() < deadline:
        assert proc.poll() is None, f"the runner exited early: {log.read_text()[-2000:]}"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store.open(runs) as st:
        before = {t.id: t for t in st.latest_completed_trials(run_id)}
        running = [t for t in st.trials(run_id) if t.status is TrialStatus.RUNNING]
    assert 4 <= len(before) < 16, "the kill should land mid-run"
    r = subprocess.run([sys.executable, "-m", "agentmeter.cli", "resume", run_id, "--store", str(runs),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with Store.open(runs) as st:
        final = st.latest_completed_trials(run_id)
        tries = st.trials(run_id)
    assert len(final) == 16
    assert len({t.id for t in final}) == 16
    # completed trials were not rerun: same record, one completed try each
    for tid, rec in before.items():
        again = [t for t in tries if t.id == tid and t.status.final
                 and t.status is not TrialStatus.INFRA_INVALID]
        assert len(again) == 1 and again[0].try_number == rec.try_number
    # tries interrupted by the kill were closed and rerun under a new try number
    for t in running:
        assert any(x.id == t.id and x.try_number > t.try_number for x in tries)
    statuses = {(t.task_id, t.config_id): t.status for t in final}
    assert sum(s is TrialStatus.PASSED for s in statuses.values()) == 8
    # nothing of the killed runner is left behind
    from agentmeter.paths import cache_dir
    # (a sandbox directory's name starts with its owner's pid, even when the kill landed
    # before its owner.json was written)
    top = cache_dir() / "sandboxes"
    leftovers = [p for p in top.iterdir() if p.name.startswith(f"{proc.pid}-")] if top.exists() else []
    assert leftovers == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    suite = tmp_path / "suite"
    for i in range(6):
        make_task(suite, f"t{i}", solve="sleep 1; echo done > /app/done")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "agentmeter.cli", "run", "--suite", str(suite),
                             "-a", "oracle", "--concurrency", "2", "--run-id", "stopped",
                             "--store", str(runs)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while completed_trials(runs, "stopped") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "agentmeter resume" in stderr
    with Store.open(runs) as st:
        assert st.get_run("stopped").status == "interrupted"  # type: ignore[union-attr]
        tries = st.trials("stopped")
    assert not [t for t in tries if not t.status.final]  # in-flight tries were closed
    assert any(t.error and t.error.startswith("interrupted") for t in tries)
    # nothing of the stopped runner is left running
    assert eventually(lambda: not any(str(suite).encode() in _cmdline_of(p)
                                      for p in os.listdir("/proc") if p.isdigit()))


def _cmdline_of(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_grid_file_and_pairs(tmp_path: Path) -> None:
    from agentmeter.runner.session import load_grid

    grid = tmp_path / "grid.toml"
    grid.write_text('agents = ["native"]\nmodels = ["scripted/solver", "scripted/quitter"]\n'
                    '[[pairs]]\nagent = "oracle"\nmodel = "none"\n'
                    '[agent_options.native]\nmax_turns = 7\n')
    g = load_grid(grid)
    req = RunRequest(suites=["starter"], task_ids=["log-level-counts"], agents=g.agents,
                     models=g.models, pairs=[(p["agent"], p["model"]) for p in g.pairs],
                     agent_options=g.agent_options)
    labels = sorted(c.record.label for c in prepare(req).configs)
    assert labels == ["native × scripted/quitter", "native × scripted/solver", "oracle"]
    assert all(c.record.agent.options == {"max_turns": 7} for c in prepare(req).configs
               if c.record.agent.name == "native")
    (tmp_path / "bad.toml").write_text('agents = ["native"]\n[[pairs]]\nagent = "codex"\n')
    with pytest.raises(RunSetupError, match=r"bad.toml: pairs\[0\]"):
        load_grid(tmp_path / "bad.toml")
    (tmp_path / "bad2.toml").write_text('agentz = ["native"]\n')
    with pytest.raises(RunSetupError, match="bad2.toml: field agentz"):
        load_grid(tmp_path / "bad2.toml")


async def test_budget_exceeded_stops_the_agent(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    task = make_task(suite, "budgeted")
    toml = (task / "task.toml").read_text().replace("[agent]\n", "[agent]\nmax_calls = 2\n")
    (task / "task.toml").write_text(toml)
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(suite)], agents=["native"],
                                       models=["scripted/explorer-20"]))
    (t,) = store.latest_completed_trials(rid)
    assert t.status is TrialStatus.BUDGET_EXCEEDED, t.error
    calls = store.model_calls(rid, t.id)
    # two calls reached the model; the third was refused by the gateway, never forwarded
    assert [c.error for c in calls][:2] == [None, None]
    assert calls[-1].error == "budget_exceeded" and len(calls) <= 4

"""Scenarios (Harbor multi-step tasks, AgencyBench scenarios) on real sandboxes: one sandbox
across steps and rounds, feedback rounds, halting, resume after SIGKILL, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import completed_trials
from taskgen import make_scenario

from agentmeter.records import FEEDBACK_OPENING, TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.suite import load_suite


async def _run(store: Store, req: RunRequest) -> str:
    rid, _ = await run(store, prepare(req))
    return rid


def _by_step(store: Store, rid: str, label_part: str) -> dict[str, object]:
    labels = {c.id: c.label for c in store.run_configs(rid)}
    return {t.task_id: t for t in store.latest_completed_trials(rid)
            if label_part in labels[t.config_id]}


def test_steps_load_as_ordered_tasks_of_one_scenario(tmp_path: Path) -> None:
    make_scenario(tmp_path / "suite", "scn", steps=3)
    suite = load_suite(tmp_path / "suite")
    assert [t.id for t in suite.tasks] == ["scn.s1", "scn.s2", "scn.s3"]
    first = suite.tasks[0]
    assert first.scenario is not None and first.scenario.steps == ("scn.s1", "scn.s2", "scn.s3")
    assert [t.scenario_position for t in suite.tasks] == [1, 2, 3]
    assert first.scenario.max_attempts == 2 and first.pass_threshold == 1.0
    assert suite.select(task_ids=["scn"]) == list(suite.tasks)  # the scenario id names its steps
    # a Harbor multi-step task without [scenario]: one round per step
    make_scenario(tmp_path / "h", "harbor", steps=2, max_attempts=None)
    assert load_suite(tmp_path / "h" / "harbor").tasks[0].scenario.max_attempts == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("edit,match", [
    (lambda d: (d / "steps" / "s2" / "instruction.md").unlink(), "s2/instruction.md"),
    (lambda d: (d / "task.toml").write_text((d / "task.toml").read_text()
                                            + '[[steps]]\nname = "s1"\n'), "duplicate step name"),
    (lambda d: (d / "task.toml").write_text((d / "task.toml").read_text()
                                            + '[[steps]]\nname = "nowhere"\n'), "steps/nowhere"),
    (lambda d: (d / "task.toml").write_text((d / "task.toml").read_text().replace(
        "max_attempts = 2", "max_attempts = 0")), "scenario.max_attempts"),
])
def test_bad_scenarios_are_refused_naming_file_and_key(tmp_path: Path, edit: object,
                                                        match: str) -> None:
    d = make_scenario(tmp_path, "scn", steps=2)
    edit(d)  # type: ignore[operator]
    with pytest.raises(TaskError, match=match):
        load_suite(d)


async def test_solver_carries_the_workspace_and_learner_passes_after_feedback(
        tmp_path: Path) -> None:
    make_scenario(tmp_path / "suite", "scn", steps=3)
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(tmp_path / "suite")], agents=["native"],
                                       models=["scripted/solver", "scripted/learner",
                                               "scripted/quitter"], concurrency=2))
    solver = _by_step(store, rid, "solver")
    assert {k: v.status for k, v in solver.items()} == {  # type: ignore[attr-defined]
        f"scn.s{k}": TrialStatus.PASSED for k in (1, 2, 3)}
    for k, t in solver.items():
        assert t.extra["scenario"] == "scn" and t.extra["rounds"] == 1  # type: ignore[attr-defined]
        assert t.extra["position"] == int(k[-1])  # type: ignore[attr-defined]
    learner = _by_step(store, rid, "learner")
    for task_id, t in learner.items():
        assert t.status is TrialStatus.PASSED, (task_id, t.error)  # type: ignore[attr-defined]
        assert t.extra["rounds"] == 2 and t.extra["round_scores"] == [0.0, 10.0]  # type: ignore[attr-defined]
        (feedback,) = t.extra["feedback"]  # type: ignore[attr-defined]
        assert feedback.startswith(FEEDBACK_OPENING)
        assert t.extra["session_continuity"] is True  # type: ignore[attr-defined]
        names = {a.name for a in store.artifacts(rid, t.id)}  # type: ignore[attr-defined]
        assert {"rounds/1/verifier.log", "rounds/2/verifier.log", "rounds/2/feedback.md",
                "rounds/1/native-transcript.json"} <= names
        # both rounds' model calls are the trial's: usage is their sum
        calls = store.model_calls(rid, t.id)  # type: ignore[attr-defined]
        assert len(calls) == t.model_calls and len({c.seq for c in calls}) == len(calls)  # type: ignore[attr-defined]
    quitter = _by_step(store, rid, "quitter")
    assert all(t.status is TrialStatus.FAILED for t in quitter.values())  # type: ignore[attr-defined]
    assert all(t.extra["rounds"] == 2 for t in quitter.values())  # type: ignore[attr-defined]


async def test_halt_on_fail_records_the_rest_as_skipped(tmp_path: Path) -> None:
    make_scenario(tmp_path / "suite", "scn", steps=3, max_attempts=1, halt_on_fail=True)
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(tmp_path / "suite")], agents=["nop"]))
    trials = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert trials["scn.s1"].status is TrialStatus.FAILED and not trials["scn.s1"].extra.get("skipped")
    for k in ("scn.s2", "scn.s3"):
        assert trials[k].status is TrialStatus.FAILED and trials[k].extra["skipped"] is True
        assert trials[k].reward == 0.0 and "halted at step 1" in (trials[k].error or "")
    # Harbor's min_reward halts the same way; the oracle passes every step
    rid = await _run(store, RunRequest(suites=[str(tmp_path / "suite")], agents=["oracle"]))
    assert all(t.status is TrialStatus.PASSED for t in store.latest_completed_trials(rid))


def test_sigkill_mid_scenario_then_resume_counts_each_step_once(tmp_path: Path) -> None:
    make_scenario(tmp_path / "suite", "scn", steps=4, solve_sleep=0.5)
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "agentmeter.cli", "run", "--suite", str(tmp_path / "suite"),
           "-a", "oracle", "--run-id", "r1", "--store", str(runs)]
    log = tmp_path / "runner.log"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 180
    while completed_trials(runs, "r1") < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store.open(runs) as st:
        before = st.latest_completed_trials("r1")
    assert 2 <= len([t for t in before if t.status is TrialStatus.PASSED]) < 4
    r = subprocess.run([sys.executable, "-m", "agentmeter.cli", "resume", "r1", "--store",
                        str(runs)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with Store.open(runs) as st:
        final = st.latest_completed_trials("r1")
        tries = st.trials("r1")
    assert sorted(t.task_id for t in final) == [f"scn.s{k}" for k in (1, 2, 3, 4)]
    assert all(t.status is TrialStatus.PASSED for t in final)
    # every counted step is from one run of the scenario: the restarted one
    assert len({t.extra["scenario_run"] for t in final}) == 1
    assert final[0].extra["scenario_run"] == 1
    superseded = [t for t in tries if (t.error or "").startswith("superseded")]
    assert superseded and all(t.extra["scenario_run"] == 0 for t in superseded)


HOSTILE_DAEMON = r"""
cd /app && cat /app/step0 > /dev/null 2>&1
echo line1 > /app/step1
# a daemon that outlives the step: loots the verifier's files and forges rewards, forever
setsid nohup bash -c 'while true; do
  cat /tests/* /tests/.* /.agentmeter-verifier/tests/* >> /app/loot 2>/dev/null
  mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null
  sleep 0.05; done' > /dev/null 2>&1 &
"""


async def test_a_hostile_step_cannot_read_or_forge_a_later_steps_verdict(tmp_path: Path) -> None:
    d = make_scenario(tmp_path / "suite", "scn", steps=2)
    (d / "steps" / "s1" / "solution" / "solve.sh").write_text("#!/bin/bash\n" + HOSTILE_DAEMON)
    # step 2 passes only with a secret that exists nowhere but in its own test
    (d / "steps" / "s2" / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        'if [ "$(cat /app/step2 2>/dev/null)" = "SECRET-7731" ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n")
    (d / "steps" / "s2" / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncat /tests/test.sh /.agentmeter-verifier/tests/test.sh >> /app/loot 2>/dev/null\n"
        "grep -o 'SECRET-[0-9]*' /app/loot | head -1 > /app/step2 || true\n")
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(d)], agents=["oracle"]))
    trials = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert trials["scn.s1"].status is TrialStatus.PASSED
    s2 = trials["scn.s2"]
    assert s2.status is TrialStatus.FAILED and s2.extra["round_scores"] == [0.0, 0.0], s2.error
    # the daemon's forged reward.txt never counted: each round's verification started clean
    assert s2.extra["feedback"] and s2.reward == 0.0


#: step 1's agent puts bash and rm first on the image's PATH (a venv in its workdir): whoever
#: runs them as root leaves a root-owned mark
PLANT_ROOT_MARK = r"""
mkdir -p /app/.venv/bin
printf '#!/bin/sh\n[ "$(/usr/bin/id -u)" = 0 ] && echo "$0 $*" >> /app/.venv/as-root\n'\
'exec /usr/bin/${0##*/} "$@"\n' > /app/.venv/bin/bash
chmod 755 /app/.venv/bin/bash && ln -s bash /app/.venv/bin/rm
"""


async def test_a_later_steps_setup_runs_no_program_an_earlier_agent_planted(
        tmp_path: Path) -> None:
    d = make_scenario(tmp_path / "suite", "scn", steps=2, max_attempts=1,
                      extra_toml="[agent]\nsandbox_account = true\n")  # uid 1000
    (d / "environment" / "Dockerfile").write_text(  # the image of test_verifier_hardening's
        "FROM debian:trixie\nWORKDIR /app\n"
        "ENV PATH=/app/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")
    with open(d / "steps" / "s1" / "solution" / "solve.sh", "a") as f:
        f.write(PLANT_ROOT_MARK)
    (d / "steps" / "s2" / "workdir").mkdir()  # a setup.sh: run as root before step 2's agent
    (d / "steps" / "s2" / "workdir" / "setup.sh").write_text("#!/bin/bash\n/usr/bin/true\n")
    test = d / "steps" / "s2" / "tests" / "test.sh"  # a mark fails it: no reward
    test.write_text(test.read_text().replace(
        "\n", "\n[ -e /app/.venv/as-root ] && { /usr/bin/cat /app/.venv/as-root >&2; exit 1; }\n", 1))
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(d)], agents=["oracle"]))
    trials = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert trials["scn.s1"].status is TrialStatus.PASSED, trials["scn.s1"].error
    s2 = trials["scn.s2"]
    assert (s2.status, s2.reward) == (TrialStatus.PASSED, 1.0), s2.error


@pytest.mark.parametrize("cli", ["claude-code", "qwen-code", "kimi", "opencode"])
async def test_cli_continues_its_session_across_steps_and_rounds(tmp_path: Path, cli: str) -> None:
    """A real agent CLI under the scripted learner: each step fails its first round and passes
    after the feedback, in one conversation (the CLI's --continue on every run but the first)."""
    make_scenario(tmp_path / "suite", "scn", steps=2)
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(tmp_path / "suite")], agents=[cli],
                                       models=["scripted/learner"]))
    trials = sorted(store.latest_completed_trials(rid), key=lambda t: t.task_id)
    assert [t.status for t in trials] == [TrialStatus.PASSED, TrialStatus.PASSED], \
        [t.error for t in trials]
    for t in trials:
        assert t.extra["round_scores"] == [0.0, 10.0] and t.extra["session_continuity"] is True
    argv = [(store.run_dir(rid) / a.relpath).read_text() for t in trials
            for a in store.artifacts(rid, t.id) if a.name.endswith("/trajectory.json")]
    assert sum('"--continue"' in text for text in argv) == 3  # every run but the very first


async def test_user_sim_feedback_comes_from_the_judge_model_as_evaluation_cost(
        tmp_path: Path) -> None:
    d = make_scenario(tmp_path / "suite", "scn", steps=1)
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("halt_on_fail = false",
                                             'halt_on_fail = false\nfeedback = "user_sim"'))
    store = Store.open(tmp_path / "runs")
    rid = await _run(store, RunRequest(suites=[str(d)], agents=["native"],
                                       models=["scripted/learner"], judge_model="scripted/judge"))
    (t,) = store.latest_completed_trials(rid)
    assert t.status is TrialStatus.PASSED and t.extra["round_scores"] == [0.0, 10.0], t.error
    (feedback,) = t.extra["feedback"]
    assert feedback.startswith(FEEDBACK_OPENING) and "scripted user simulation" in feedback
    judge_calls = [c for c in store.model_calls(rid, t.id) if c.purpose == "judge"]
    assert len(judge_calls) == 1 and t.extra["evaluation"]["calls"] == 1
    # the agent's own usage leaves the user simulation out
    assert t.model_calls == len(store.model_calls(rid, t.id)) - 1
    # without a judge model the step cannot get its feedback: infra, said so
    rid = await _run(store, RunRequest(suites=[str(d)], agents=["native"],
                                       models=["scripted/learner"], max_infra_retries=0))
    (t,) = store.latest_completed_trials(rid)
    assert t.status is TrialStatus.INFRA_INVALID and "needs a judge model" in (t.error or "")

"""The difftest verifier kind end to end: real sandboxes, the real engine, the real runner.

The oracle's own source as the candidate passes every valid case; an empty workspace builds
nothing; a renamed CLI is reached through the command-name mapping; and a hostile candidate that
hangs, forks, fills the disk, leaves daemons and files behind, and reaches for the oracle and the
results, fails the cases it attacks while the engine goes on and every other case stays exact.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from difftest_tasks import make_difftest_task
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401

from agentmeter.records import TrialRecord, TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store

HOSTILE = '''import json, os, subprocess, sys, time

BREACHES = []


def probe():
    for path in ("/opt/oracle/bin/greet", "/opt/oracle/src/greet.py", "/tests/cases.jsonl",
                 "/logs/verifier/difftest/cases.jsonl"):
        try:
            open(path).read(1)
            BREACHES.append("read " + path)
        except OSError:
            pass
    for path in ("/logs/verifier/difftest/cases.jsonl", "/logs/verifier/reward.json",
                 "/difftest/candidate/venv/bin/greet"):
        try:
            open(path, "a").write("forged")
            BREACHES.append("wrote " + path)
        except OSError:
            pass
    for path in ("/tmp/greet-last-greeting", "/difftest/oracle/home", "/difftest/oracle/tmp"):
        try:  # what the oracle wrote for this very case
            if os.path.isdir(path):
                os.listdir(path)
            else:
                open(path).read()
            BREACHES.append("read the oracle's " + path)
        except OSError:
            pass
    if os.path.exists("/tmp/hostile-was-here") or os.path.exists("/var/tmp/hostile-was-here"):
        BREACHES.append("a file survived from an earlier case")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"hostile-daemon" in open(f"/proc/{pid}/cmdline", "rb").read():
                BREACHES.append("a daemon survived from an earlier case")
        except OSError:
            pass


def main():
    probe()
    open("/tmp/hostile-was-here", "w").write("x")
    open("/var/tmp/hostile-was-here", "w").write("x")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "hostile-daemon"],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    args = sys.argv[1:]
    if BREACHES:
        print("BREACH", BREACHES)
        return
    if args[0] == "hello":
        msg = "Hello, " + args[1] + "!"
        print(msg.upper() if "--shout" in args else msg)
    elif args[0] == "count":
        time.sleep(10000)  # hangs: the per-case timeout ends it
    else:
        for _ in range(64):  # forks, then fills the disk
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
        with open(args[1], "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
'''


async def _run(tmp_path: Path, suite: Path, agent: str, backend: str = "local",
               task_ids: list[str] | None = None) -> dict[str, TrialRecord]:
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=[agent],
                                                 task_ids=task_ids or [], concurrency=2,
                                                 backend=backend)), None)
    return {t.task_id: t for t in store.latest_completed_trials(rid)}


def _artifact(t: TrialRecord, store: Path, name: str) -> Path:
    files = [f for f in store.rglob(name) if t.id.replace(":", "_") in str(f) or t.id in str(f)]
    assert len(files) == 1, files
    return files[0]


def _case_rows(t: TrialRecord, store: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in
            _artifact(t, store, "difftest_cases.jsonl").read_text().splitlines()]


async def test_oracle_source_passes_and_empty_workspace_builds_nothing(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    make_difftest_task(suite, "greet")
    make_difftest_task(suite, "greet-renamed", cli_name="salute")
    passed = await _run(tmp_path, suite, "oracle")
    for task in ("greet", "greet-renamed"):
        ok = passed[task]
        assert ok.status is TrialStatus.PASSED, (ok.error, ok.rewards)
        r = ok.rewards
        assert r["build"] == 1.0 and ok.reward == 1.0
        # `count missing.txt` and `write sub/none.txt`: the oracle fails, the case is left out
        assert (r["cases_total"], r["cases_valid"], r["cases_oracle_failed"]) == (14, 12, 2)
        for key in ("c01", "c02", "c03", "c04"):
            assert r[f"{key}.exec"] == r[f"{key}.em"] == r[f"{key}.fm"] == 1.0, r
            assert r[f"{key}.side_effects"] == 1.0
        assert ok.extra["reward_metric"] == "fm"  # no judge model in this run
        assert ok.extra["difftest_classes"]["c04"] == "greet write <file> <text>"
        assert ok.extra["entry_point"]["found"] == ("greet" if task == "greet" else "salute")
        assert ok.extra["entry_point"]["help_ok"] is True
        # the two negative cases, scored for the candidate (paper §5.1): the oracle's own
        # source fails them as the oracle does; what the agent wrote (RQ4)
        assert (r["negative_cases"], r["negative_exit_agree"]) == (2.0, 1.0)
        assert ok.extra["structure"]["files"] >= 2 and ok.extra["structure"]["loc"] > 0
        log = _artifact(ok, tmp_path / "store", "verifier.log").read_text()
        assert "engine: 14 cases; runs: oracle 14, candidate 14\n" in log, log
    # an empty workspace installs nothing, so no command resolves under either name: the
    # renamed task would repeat this trial
    (empty,) = (await _run(tmp_path, suite, "nop", task_ids=["greet"])).values()
    assert empty.status is TrialStatus.FAILED
    assert empty.rewards["build"] == 0.0 and empty.reward == 0.0
    # a candidate failure, named as such: no case is a framework error
    r = empty.rewards
    assert (r["cases_framework_error"], r["cases_not_built"]) == (0.0, 14.0)
    assert "the candidate did not build" in (empty.error or "")
    # and the oracle ran no case for it (nothing it printed could count): the engine's count
    # of runs in the verifier's log, no oracle result, no oracle time
    log = _artifact(empty, tmp_path / "store", "verifier.log").read_text()
    assert "engine: 14 cases; runs: oracle 0, candidate 0 (the candidate did not" in log, log
    rows = _case_rows(empty, tmp_path / "store")
    assert len(rows) == 14 and all(row["status"] == "not_built" and row["oracle_exit"] is None
                                   for row in rows)
    assert "oracle_ms_per_cmd" not in r


#: the agent's programs on the image's PATH and PYTHONPATH (a venv in its workdir): the engine,
#: root after the agent, must run none of them
PLANT = r"""
mkdir -p /app/.venv/bin /app/.venv/lib
for n in chown chmod; do
printf '#!/bin/sh\necho "PLANTED $0 uid=$(/usr/bin/id -u)" >&2\nexec /usr/bin/${0##*/} "$@"\n' \
    > /app/.venv/bin/$n
chmod 755 /app/.venv/bin/$n; done
echo 'import os, sys; sys.stderr.write(f"PLANTED sitecustomize uid={os.getuid()}\n")' \
    > /app/.venv/lib/sitecustomize.py
"""


async def _hostile(tmp_path: Path, backend: str) -> None:
    suite = tmp_path / "suite"
    d = make_difftest_task(suite, "greet-hostile", HOSTILE, case_timeout=3.0)
    with open(d / "environment" / "Dockerfile", "a") as f:
        f.write("ENV PATH=/app/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                " PYTHONPATH=/app/.venv/lib\n")
    with open(d / "solution" / "solve.sh", "a") as f:
        f.write(PLANT)
    t = (await _run(tmp_path, suite, "oracle", backend))["greet-hostile"]
    log = _artifact(t, tmp_path / "store", "verifier.log").read_text()
    assert "PLANTED" not in log, log
    r = t.rewards
    assert t.status is TrialStatus.FAILED, (t.error, r)
    assert r["build"] == 1.0 and r["cases_not_run"] == 0 and r["cases_framework_error"] == 0
    # hello classes: exact, so no probe found a way out (a breach prints BREACH instead)
    assert r["c01.em"] == r["c02.em"] == 1.0, _case_rows(t, tmp_path / "store")[:2]
    rows = {row["id"]: row for row in _case_rows(t, tmp_path / "store")}
    counts = [row for row in rows.values() if row["cls"] == "greet count <file>"
              and row["status"] == "valid"]
    assert counts and all(row["candidate_exit"] == 124 and row["candidate_timed_out"]
                          for row in counts)
    writes = [row for row in rows.values() if row["cls"] == "greet write <file> <text>"
              and row["status"] == "valid"]
    assert writes and all(row["candidate_exit"] not in (0, 124) for row in writes), writes
    assert r["c03.exec"] == r["c04.exec"] == 0.0
    assert t.reward == 0.5  # two of four classes exact


async def test_hostile_candidate_fails_only_the_cases_it_attacks(tmp_path: Path) -> None:
    await _hostile(tmp_path, "local")


@pytest.mark.slow
async def test_hostile_candidate_on_docker(tmp_path: Path, docker_daemon: object) -> None:
    """The same on the docker backend (its environment built by dockerd, the engine in a
    container)."""
    await _hostile(tmp_path, "docker")


RESTYLED = '''import sys


def main():
    args = sys.argv[1:]
    if args[0] == "hello" and "--shout" in args:
        print("HELLO " + args[1].upper())  # the payload differs: no comma, no "!"
    elif args[0] == "hello":
        print("hello, " + args[1] + "!")  # the same payload in other letter case
    else:
        sys.exit(3)
'''


async def test_judge_decides_sm_through_the_gateway_as_evaluation_cost(tmp_path: Path) -> None:
    """Scripted judge (test double): SM below FM where the payload differs, equal where only the
    style differs; the judge's calls are the trial's evaluation cost, not the agent's."""
    suite = tmp_path / "suite"
    make_difftest_task(suite, "greet-restyled", RESTYLED)
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(
        suites=[str(suite)], agents=["oracle"], backend="local",
        judge_model="scripted/judge:normalized")), None)
    (t,) = store.latest_completed_trials(rid)
    r = t.rewards
    assert t.extra["reward_metric"] == "sm"
    assert (r["c01.em"], r["c01.fm"], r["c01.sm"]) == (0.0, 1.0, 1.0)  # style only
    assert (r["c02.em"], r["c02.fm"], r["c02.sm"]) == (0.0, 1.0, 0.0)  # payload differs
    assert r["c03.exec"] == r["c03.sm"] == 0.0
    assert t.reward == 0.25
    ev = t.extra["evaluation"]
    assert ev["model"] == "scripted/judge:normalized"
    assert ev["calls"] == 8  # one per distinct (oracle, candidate) stdout pair
    assert t.model_calls == 0 and t.cost_usd in (None, 0.0)  # the oracle agent spent nothing
    rows = _case_rows(t, tmp_path / "store")
    assert all(row["judge_reason"] for row in rows if row["cls"].startswith("greet hello"))


async def test_scripted_solver_writes_the_reference_through_the_agents_shell(
        tmp_path: Path) -> None:
    """A multi-file reference (solution/ref/…) reaches the workspace through the native agent's
    own shell tool under scripted/solver; scripted/quitter builds nothing."""
    suite = tmp_path / "suite"
    make_difftest_task(suite, "greet")
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(
        suites=[str(suite)], agents=["native"], models=["scripted/solver", "scripted/quitter"],
        backend="local", concurrency=2)), None)
    by_model = {t.config_id: t for t in store.latest_completed_trials(rid)}
    rewards = sorted((t.rewards["build"], t.reward) for t in by_model.values())
    assert rewards == [(0.0, 0.0), (1.0, 1.0)], [(t.status, t.error) for t in by_model.values()]


def test_the_engine_runs_only_its_own_directory_s_modules(tmp_path: Path) -> None:
    """The engine runs as root after the agent (``python3 -I engine.py``), its code in sibling
    modules: they must come from its own (staged, root-only) directory, never from a module of
    the same name in the current directory or on ``PYTHONPATH`` (the agent's workdir)."""
    from agentmeter.verify.difftest import engine

    marker = tmp_path / "planted module ran"
    for name in ("engine_main", "engine_install", "engine_proc", "agentmeter_difftest_engine"):
        (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = subprocess.run([sys.executable, "-I", engine.__file__, "--config", "/nonexistent",
                        "--cases", "/nonexistent", "--out", str(tmp_path / "out")],
                       cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "engine: " in r.stderr, r  # the real engine: no config
    assert not marker.exists()

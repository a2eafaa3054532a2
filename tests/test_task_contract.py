"""Task fields are honoured or refused, never accepted and ignored: users, per-phase networks,
``build_timeout_sec`` and ``artifacts`` (real trials on the local backend)."""

from __future__ import annotations

from pathlib import Path

import pytest
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.suite import load_task


def _with_toml(task_dir: Path, extra_top: str = "", **sections: str) -> Path:
    """Add top-level keys and lines to sections of a generated task's task.toml."""
    toml = task_dir / "task.toml"
    text = toml.read_text()
    for section, lines in sections.items():
        header = f"[{section}]\n"
        text = text.replace(header, header + lines + "\n") if header in text else \
            text + header + lines + "\n"
    toml.write_text(extra_top + text)
    return task_dir


@pytest.mark.parametrize(("extra", "sections", "field", "words"), [
    # taskgen's tasks keep agentmeter's account (sandbox_account = true): no other agent user
    ("", {"agent": 'user = "root"'}, "agent.user", "sandbox_account = true"),
    ("", {"agent": "user = 0"}, "agent.user", "sandbox_account = true"),
    ("", {"agent": 'user = "postgres"'}, "agent.user", "sandbox_account = true"),
    ("", {"verifier": 'user = "www-data"'}, "verifier.user", "'agent' (1000) and 'root' (0)"),
    # per-phase networks that differ are honoured: tests/test_network_switch.py
    ('artifacts = ["out.log"]\n', {}, "artifacts[0]", "absolute path"),
    ('artifacts = [{source = "/app/x", destination = "../x"}]\n', {},
     "artifacts[0].destination", "relative path"),
])
def test_fields_we_cannot_honour_are_refused_naming_the_key(
        tmp_path: Path, extra: str, sections: dict[str, str], field: str, words: str) -> None:
    task = _with_toml(make_task(tmp_path, "t"), extra, **sections)
    with pytest.raises(TaskError) as info:
        load_task(task)
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems, problems
    assert words in problems[field]
    assert str(task / "task.toml") in str(info.value)


def test_fields_we_honour_load(tmp_path: Path) -> None:
    task = _with_toml(make_task(tmp_path, "t"),
                      'artifacts = ["/app/done", {source = "/app/logs", destination = "logs", '
                      'exclude = ["*.tmp"]}]\n',
                      agent='user = 1000\nnetwork_mode = "public"',
                      verifier='user = "agent"',
                      environment='network_mode = "public"')
    t = load_task(task)
    assert t.verifier_user == "agent" and t.allow_internet is True
    assert [(a.source, a.destination, a.exclude) for a in t.artifacts] == [
        ("/app/done", "app/done", ()), ("/app/logs", "logs", ("*.tmp",))]
    assert t.build_timeout_s == 300.0


async def test_artifacts_are_collected_bounded_and_missing_ones_noted(tmp_path: Path) -> None:
    solve = ("echo done > /app/done; mkdir -p /app/logs/sub; echo a > /app/logs/a.txt; "
             "echo b > /app/logs/sub/b.txt; echo junk > /app/logs/c.tmp; "
             # a hostile 2 GiB sparse file: costs nothing inside, must cost the host nothing
             "truncate -s 2G /app/huge.bin")
    task = _with_toml(make_task(tmp_path / "suite", "arts", solve=solve),
                      'artifacts = ["/app/done", {source = "/app/logs", destination = "logs", '
                      'exclude = ["*.tmp"]}, "/app/missing", "/app/huge.bin"]\n')
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(task)], agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.PASSED, trial.error
    arts = {a.name: a for a in store.artifacts(rid, trial.id)}
    assert {"artifacts/app/done", "artifacts/logs/a.txt", "artifacts/logs/sub/b.txt"} <= set(arts)
    assert not any(name.endswith(".tmp") or "huge" in name for name in arts)
    run_dir = store.run_dir(rid)
    assert (run_dir / arts["artifacts/logs/sub/b.txt"].relpath).read_text() == "b\n"
    assert (run_dir / arts["artifacts/app/done"].relpath).read_text() == "done\n"
    problems = trial.extra["artifact_problems"]
    assert any(p.startswith("/app/missing:") and "no such file" in p for p in problems), problems
    assert any(p.startswith("/app/huge.bin:") and "larger than" in p for p in problems), problems
    sizes = sum(p.stat().st_size for p in (run_dir).rglob("*") if p.is_file())
    assert sizes < 100 << 20  # nothing of the 2 GiB reached the store


async def test_build_timeout_ends_the_environment_build(tmp_path: Path) -> None:
    dockerfile = f"FROM debian:trixie\nWORKDIR /app\nRUN sleep 60; echo {tmp_path.name}\n"
    task = make_task(tmp_path / "suite", "slow-build", dockerfile=dockerfile)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("build_timeout_sec = 300.0", "build_timeout_sec = 2.0"))
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(task)], agents=["oracle"],
                                                 max_infra_retries=0)))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.INFRA_INVALID
    assert "timed out" in (trial.error or ""), trial.error


@pytest.mark.parametrize(("user", "uid"), [(None, "0"), ('"agent"', "1000"), ("0", "0")])
async def test_verifier_runs_as_the_tasks_verifier_user(tmp_path: Path, user: str | None,
                                                        uid: str) -> None:
    test = ("#!/bin/bash\nid -u > /logs/verifier/uid.txt\n"
            f"if [ \"$(id -u)\" = {uid} ]; then echo 1 > /logs/verifier/reward.txt; "
            "else echo 0 > /logs/verifier/reward.txt; fi\n")
    task = make_task(tmp_path / "suite", "who", test=test)
    if user is not None:
        _with_toml(task, verifier=f"user = {user}")
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(task)], agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.PASSED, trial.error

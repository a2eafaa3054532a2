"""The built-in ``clitools`` suite (CLI-generation tasks): it loads, its frozen cases parse, every
oracle lives in /opt/oracle where the agent cannot read it, the self-authored oracles have one
copy of their source, and on real sandboxes the reference solution scores 1.0 while an empty
workspace fails the build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_suite
from agentmeter.verify.difftest.config import class_keys, read_cases

SUITE = "clitools"
#: tasks whose oracle is self-authored: environment/oracle holds its only source copy
SELF_AUTHORED = {"csvq": "python", "jsonq": "javascript", "kvs": "go"}


def test_suite_loads_with_five_languages_tagged_tasks_and_a_core_subset() -> None:
    suite = load_suite(SUITE)
    assert suite.builtin and len(suite.tasks) >= 5
    core = suite.select("core")
    assert len(core) == 2
    languages = set()
    for task in suite.tasks:
        assert task.verifier_kind == "difftest" and task.difftest is not None
        assert "clitoolbench" in task.tags
        lang = f"language:{task.difftest.language}"
        assert lang in task.tags, task.id
        languages.add(task.difftest.language)
        assert task.metadata_extra.get("oracle_source") and task.metadata_extra.get("oracle_version")
        assert task.has_solution
    assert languages == {"python", "javascript", "go"}


def test_every_task_has_frozen_cases_in_at_least_three_classes() -> None:
    for task in load_suite(SUITE).tasks:
        assert task.difftest is not None
        cases = read_cases(task.tests_dir / task.difftest.cases)
        assert len(class_keys(cases)) >= 3, task.id
        oracle = task.difftest.oracle_name
        assert all(re.match(rf"^{re.escape(oracle)}(\s|$)", c.command) for c in cases), task.id
        # the prompt shows the command name and one sample per class
        assert f"`{task.difftest.cli_name}`" in task.instruction
        for cls in class_keys(cases):
            assert f"Command Category: `{cls}`" in task.instruction, (task.id, cls)


def test_every_oracle_is_installed_in_opt_oracle_readable_by_its_account_alone() -> None:
    for task in load_suite(SUITE).tasks:
        assert task.dockerfile is not None
        text = task.dockerfile.read_text()
        assert "install -d -o 1001 -g 1001 -m 0700 /opt/oracle /opt/oracle/bin" in text, task.id
        assert "chown -R 1001:1001 /opt/oracle && chmod 0700 /opt/oracle" in text, task.id
        assert "WORKDIR /app" in text and "chown 1000:1000 /app" in text, task.id
        assert task.difftest is not None and task.difftest.oracle_bin == "/opt/oracle/bin"
        if task.difftest.language == "python":
            assert "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/wheelhouse" in text, task.id
            assert "--require-hashes" in text  # the wheelhouse is pinned by hash
            # the wheelhouse never holds the oracle's own package
            assert f"'{task.id}==" not in text
        if task.difftest.language == "go":
            assert "GOPROXY=off GOFLAGS=-mod=mod GOSUMDB=off" in text
        if task.difftest.language == "javascript":
            assert "npm_config_offline=true" in text


@pytest.mark.parametrize("task_id", sorted(SELF_AUTHORED))
def test_self_authored_oracle_source_has_one_copy(task_id: str) -> None:
    """The reference solution links to environment/oracle (the Dockerfile's copy): never a second,
    hand-maintained copy that could drift from what the oracle runs."""
    task = load_suite(SUITE).task(task_id)
    assert task.solution_dir is not None
    oracle_dir = (task.environment_dir / "oracle").resolve()
    files = [p for p in (task.solution_dir / task_id).rglob("*") if not p.is_dir()]
    assert files
    for p in files:
        assert p.is_symlink(), p
        assert oracle_dir in p.resolve().parents, p
    # solve.sh finds its files next to itself (the scripted solver runs it from a temp dir)
    solve = (task.solution_dir / "solve.sh").read_text()
    assert '$(dirname "$0")' in solve and "/solution" not in solve
    # and the oracle agent's solution files carry the linked content
    sources = task.solution_files()
    assert all(not p.is_dir() and p.read_bytes() for p in sources.values())


async def test_csvq_oracle_scores_one_and_core_nop_fails_the_build(tmp_path: Path) -> None:
    """The real runner: csvq's reference solution (its self-authored oracle's source), built
    with the task's install command, agrees with the oracle in /opt/oracle on every valid case
    (reward 1.0); on the core subset an empty workspace builds nothing (build 0).

    The other core task's reference (tree, 295 cases against Debian's tree) is checked by CI's
    fresh install: `agentmeter demo` runs the core subset with the scripted solver (which writes
    each reference solution through the native agent's shell) and .ci/fresh-install fails
    unless every solver trial passes. Its 590 case runs here cost more than the rest of this
    test together."""
    store = Store.open(tmp_path)
    rid, _ = await run(store, prepare(RunRequest(suites=[SUITE], task_ids=["csvq"],
                                                 agents=["oracle"])))
    (t,) = store.latest_completed_trials(rid)
    assert t.status is TrialStatus.PASSED, (t.task_id, t.error, t.rewards)
    assert t.reward == 1.0 and t.rewards["build"] == 1.0
    assert t.rewards["cases_valid"] > 0
    rid, _ = await run(store, prepare(RunRequest(suites=[SUITE], subset="core", agents=["nop"],
                                                 concurrency=2)))
    trials = store.latest_completed_trials(rid)
    assert sorted(t.task_id for t in trials) == ["csvq", "tree"]
    for t in trials:
        assert t.status is TrialStatus.FAILED, (t.task_id, t.error)
        assert t.rewards.get("build") == 0.0 and not t.reward

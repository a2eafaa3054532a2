"""A task that states no network gets Harbor's default, public (through the harness's proxy,
never the host), unless the run's ``--network-default none`` tightens it; a task that states
its network keeps it, and agentmeter's own suites state theirs (issue 27, cause 2). Unit level:
loading, the run's default and the sandbox spec, no trial."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmeter.agents.reference import OracleAgent
from agentmeter.runner.network import network_source, verifier_network_label
from agentmeter.runner.runnable import with_network_default
from agentmeter.runner.session import RunRequest, RunSetupError, make_request
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import load_suites, load_task

FIXTURES = Path(__file__).parent / "fixtures"

#: a Harbor task.toml as Harbor's own examples write it: no network key anywhere
HARBOR_TOML = """version = "1.0"
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 30.0
[agent]
timeout_sec = 60.0
[environment]
build_timeout_sec = 300.0
"""


def _harbor_task(root: Path, name: str = "hello", environment: str = "",
                 tail: str = "") -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(HARBOR_TOML.replace(
        "[environment]\n", f"[environment]\n{environment}\n") + tail)
    (d / "instruction.md").write_text("Say hello.\n")
    (d / "environment" / "Dockerfile").write_text("FROM debian:trixie\nWORKDIR /app\n")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\npip install pytest\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return d


def _spec_network(task: Task, default: str) -> tuple[str, tuple[str, ...]]:
    (t,) = with_network_default([task], default)  # type: ignore[arg-type]
    spec = sandbox_spec(t, OracleAgent(), None)
    return spec.network, spec.allowed_hosts


def test_a_harbor_task_stating_no_network_is_public_unless_the_run_says_none(
        tmp_path: Path) -> None:
    task = load_task(_harbor_task(tmp_path))
    assert task.network_default and task.allow_internet  # Harbor's default, as loaded
    assert _spec_network(task, "public") == ("full", ())
    assert _spec_network(task, "none") == ("none", ())
    (tight,) = with_network_default([task], "none")
    assert network_source(tight) == "run default"


@pytest.mark.parametrize(("environment", "expected"), [
    ('network_mode = "no-network"', ("none", ())),
    ("allow_internet = false", ("none", ())),
    ('network_mode = "public"', ("full", ())),
    ("allow_internet = true", ("full", ())),
    ('allowed_hosts = ["pypi.org"]', ("allowlist", ("pypi.org",))),
])
def test_a_task_stating_its_network_keeps_it_under_either_default(
        tmp_path: Path, environment: str, expected: tuple[str, tuple[str, ...]]) -> None:
    task = load_task(_harbor_task(tmp_path, environment=environment))
    assert not task.network_default and network_source(task) == "task"
    assert _spec_network(task, "public") == expected
    assert _spec_network(task, "none") == expected


def test_the_agent_phase_stating_its_network_is_stated(tmp_path: Path) -> None:
    d = _harbor_task(tmp_path)
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n')
                    .replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    task = load_task(d)
    assert not task.network_default
    assert _spec_network(task, "public") == ("none", ())


def test_a_separate_verifier_stating_no_network_gets_the_default_too(tmp_path: Path) -> None:
    task = load_task(_harbor_task(tmp_path, tail='[verifier.environment]\nbuild_timeout_sec = 60.0\n'))
    assert task.separate_verifier is not None and task.separate_verifier.network_default
    (public,) = with_network_default([task], "public")
    (none,) = with_network_default([task], "none")
    assert verifier_network_label(public) == "public"
    assert verifier_network_label(none) == "no-network"
    stated = load_task(_harbor_task(tmp_path, "stated", tail='[verifier.environment]\n'
                                    'network_mode = "no-network"\n'))
    (kept,) = with_network_default([stated], "public")
    assert verifier_network_label(kept) == "no-network"


def test_a_terminal_bench_task_follows_the_run_default(tmp_path: Path) -> None:
    task = load_task(shutil.copytree(FIXTURES / "tb-task", tmp_path / "tb"))
    assert task.network_default
    assert _spec_network(task, "public") == ("full", ())
    assert _spec_network(task, "none") == ("none", ())


def test_the_built_in_suites_state_their_network() -> None:
    """agentmeter's own tasks do not change with the default: each states no network."""
    tasks = list(load_suites(["starter", "clitools", "agency"]).select(None, None))
    assert len(tasks) > 30
    for task in tasks:
        assert not task.network_default, task.path
        for default in ("public", "none"):
            assert _spec_network(task, default) == ("none", ()), (task.path, default)


def test_the_run_request_takes_none_or_public() -> None:
    assert RunRequest().network_default == "public"
    assert make_request(network_default="none").network_default == "none"
    with pytest.raises(RunSetupError, match=r"^--network-default: "):
        make_request(network_default="full")


def test_agentmeter_run_parses_network_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmeter.cli.app import app
    from agentmeter.runner import session

    seen: list[Any] = []

    def fake_prepare(request: RunRequest) -> Any:
        seen.append(request.network_default)
        raise RunSetupError("stop here")

    monkeypatch.setattr(session, "prepare", fake_prepare)
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--network-default", "none"])
    assert "stop here" in result.output and seen == ["none"]
    assert runner.invoke(app, ["run"]).exit_code != 0 and seen == ["none", "public"]
    bad = runner.invoke(app, ["run", "--network-default", "bogus"])
    assert bad.exit_code != 0 and "--network-default" in bad.output and seen == ["none", "public"]


def test_prepare_gives_the_runs_default(tmp_path: Path) -> None:
    from agentmeter.runner.session import prepare

    suite = tmp_path / "suite"
    _harbor_task(suite, "unstated")
    _harbor_task(suite, "stated", environment='network_mode = "public"')
    for default, unstated in (("public", True), ("none", False)):
        tasks = {t.id: t for t in prepare(RunRequest(suites=[str(suite)],
                                                     network_default=default)).tasks}
        assert tasks["unstated"].allow_internet is unstated, default
        assert tasks["stated"].allow_internet, default

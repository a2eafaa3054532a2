"""``agentmeter setup``: builds the base, a suite's environments and agent installations once."""

from __future__ import annotations

import time
from pathlib import Path

from taskgen import make_task
from typer.testing import CliRunner

from agentmeter.cli import app

runner = CliRunner()


def test_setup_builds_environments_and_agents_once(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    # a step no earlier session has built (pytest reuses tmp directory names)
    make_task(suite, "one", dockerfile=f"FROM debian:trixie\nWORKDIR /app\nRUN echo {time.time_ns()}\n")
    first = runner.invoke(app, ["setup", "--suite", str(suite), "--agents", "codex"])
    assert first.exit_code == 0, first.output
    assert "ready" in first.output
    assert "building layer" in first.output  # the task's own RUN step is new
    again = runner.invoke(app, ["setup", "--suite", str(suite), "--agents", "codex"])
    assert again.exit_code == 0 and "building layer" not in again.output
    bad = runner.invoke(app, ["setup", "--suite", str(suite), "--agents", "nosuch"])
    assert bad.exit_code == 2 and "unknown agent 'nosuch'" in bad.output


def test_agent_version_that_cannot_install_fails_once_with_the_installers_words(tmp_path: Path) -> None:
    from agentmeter.paths import cache_dir
    from agentmeter.records import TrialStatus
    from agentmeter.store.db import Store

    suite = tmp_path / "suite"
    for i in range(3):
        make_task(suite, f"t{i}")
    runs = tmp_path / "runs"
    res = runner.invoke(app, ["run", "--suite", str(suite), "-a", "codex@0.0.0-nope",
                              "-m", "scripted/solver", "--run-id", "nope", "--store", str(runs)])
    assert res.exit_code in (0, 1), res.output
    with Store.open(runs) as st:
        tries = st.trials("nope")
    assert len(tries) == 3  # one try per task: a failed install is not retried
    for t in tries:
        assert t.status is TrialStatus.INFRA_INVALID
        assert t.error is not None and t.error.startswith("agent install failed (codex@0.0.0-nope)")
        assert "0.0.0-nope" in t.error.split("last output:", 1)[1]  # npm's own last lines
    built = [p for p in (cache_dir() / "layers").glob("*/step.txt") if "0.0.0-nope" in p.read_text()]
    assert built == []  # nothing of the failed install was cached

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

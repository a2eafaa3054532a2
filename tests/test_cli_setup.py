"""``agentmeter setup``: builds the base, a suite's environments and agent installations once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
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


def test_the_demo_exits_2_on_an_infra_invalid_trial_naming_every_infra_try(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A retried try that then passed is listed but does not fail the demo; a selected trial
    that is infra_invalid does (exit 2)."""
    from agentmeter.cli.setup import exit_on_infra_invalid
    from agentmeter.records import AgentSpec, ConfigRecord, ModelSpec, RunRecord, TrialRecord, TrialStatus
    from agentmeter.store.db import Store

    store = Store.open(tmp_path / "runs")
    cfg = ConfigRecord(id="cfg", label="scripted/solver x native",
                       model=ModelSpec(name="scripted/solver", wire_api="chat"),
                       agent=AgentSpec(name="native", version="0.1"))
    for rid in ("r1", "r2"):
        store.create_run(RunRecord(id=rid))
        store.upsert_config(cfg, run_id=rid)

    def trial(rid: str, task: str, try_number: int, status: TrialStatus, error: str | None = None) -> None:
        store.save_trial(TrialRecord(id=f"cfg:{task}:0", run_id=rid, config_id="cfg", task_id=task,
                                     attempt=0, try_number=try_number, status=status, error=error))

    trial("r1", "retried", 0, TrialStatus.INFRA_INVALID, "E: Could not get lock /var/lib/dpkg/lock")
    trial("r1", "retried", 1, TrialStatus.PASSED)
    trial("r2", "fine", 0, TrialStatus.FAILED)
    exit_on_infra_invalid(store, ["r1", "r2"])  # every selected trial ran: no exit
    trial("r2", "browser", 0, TrialStatus.INFRA_INVALID,
          "the browser capture needs the Python package playwright")
    capsys.readouterr()
    with pytest.raises(typer.Exit) as e:
        exit_on_infra_invalid(store, ["r1", "r2"])
    assert e.value.exit_code == 2
    out = " ".join(capsys.readouterr().err.split())
    assert "1 trial of the demo ended infra_invalid" in out, out
    assert "cfg:retried:0 try 0 (run r1): E: Could not get lock /var/lib/dpkg/lock" in out, out
    assert "cfg:browser:0 try 0 (run r2): the browser capture needs the Python package playwright" \
        in out, out

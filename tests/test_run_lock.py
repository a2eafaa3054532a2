"""One live runner per run: a second ``run``/``resume`` of a live run is refused, a dead owner
(SIGKILL) never blocks a resume; bad run options are refused before anything is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import eventually
from taskgen import make_task
from typer.testing import CliRunner, Result

from agentmeter.cli import app
from agentmeter.records import TrialStatus
from agentmeter.runner.lock import RunLock, RunLockedError
from agentmeter.store.db import Store


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmeter.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def _cli_here(*args: str) -> Result:
    """The same CLI in this process (typer's runner): a refusal is decided before any work, and
    a Python start per call took longer than that (seconds each on a loaded machine)."""
    return CliRunner().invoke(app, list(args))


def test_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    with RunLock(tmp_path / "r", "r"):
        # another process (not just another descriptor of ours) is refused
        code = ("import sys; from pathlib import Path; from agentmeter.runner.lock import RunLock\n"
                f"with RunLock(Path({str(tmp_path / 'r')!r}), 'r'): pass\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode != 0
        assert f"run 'r' is already running (pid {os.getpid()} on " in r.stderr
    with RunLock(tmp_path / "r", "r"):  # released on exit: taken again
        pass


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    code = ("import time; from pathlib import Path; from agentmeter.runner.lock import RunLock\n"
            f"with RunLock(Path({str(tmp_path)!r}), 'r'):\n"
            "    print('held', flush=True); time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid}"):
            RunLock(tmp_path, "r").__enter__()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunLock(tmp_path, "r"):  # no staleness rule: the kernel released it with its owner
        pass


def test_concurrent_resume_of_a_live_run_is_refused(tmp_path: Path) -> None:
    """A real runner holds run 'r'; `run --run-id r` and `resume r` are refused without touching
    its trials; after the runner is SIGKILLed, resume completes every trial once."""
    suite = tmp_path / "suite"
    # the slow trial is surely mid-run while the test acts; it ends by its agent timeout
    make_task(suite, "slow", solve="sleep 600", agent_timeout=25)  # outlasts a loaded machine
    make_task(suite, "quick")
    runs = tmp_path / "runs"
    log = (tmp_path / "run.log").open("w")
    first = subprocess.Popen([sys.executable, "-m", "agentmeter.cli", "run", "-s", str(suite),
                              "-a", "oracle", "--run-id", "r", "--store", str(runs), "-c", "2"],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        def slow_running() -> bool:
            assert first.poll() is None, (tmp_path / "run.log").read_text()[-2000:]
            if not (runs / "agentmeter.db").exists():
                return False
            with Store.open(runs) as st:
                return any(t.task_id == "slow" and t.status is TrialStatus.RUNNING
                           for t in st.trials("r"))
        assert eventually(slow_running, timeout=240), "the slow trial never showed as running"
        for args in (["resume", "r"], ["run", "-s", str(suite), "-a", "oracle", "--run-id", "r"]):
            res = _cli_here(*args, "--store", str(runs))
            assert res.exit_code == 2, res.output
            assert f"run 'r' is already running (pid {first.pid} on" in " ".join(res.stderr.split())
        with Store.open(runs) as st:  # the live run's try was not closed or duplicated
            slow = [t for t in st.trials("r") if t.task_id == "slow"]
        assert [(t.try_number, t.status) for t in slow] == [(0, TrialStatus.RUNNING)]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        log.close()
    r = _cli("resume", "r", "--store", str(runs), "--json")
    assert r.returncode == 0, r.stderr
    with Store.open(runs) as st:
        final = {t.task_id: t for t in st.latest_completed_trials("r")}
    assert set(final) == {"slow", "quick"}
    assert final["quick"].status is TrialStatus.PASSED
    assert final["slow"].status is TrialStatus.TIMEOUT


@pytest.mark.parametrize(("args", "message"), [
    (["--run-id", "../x"], "--run-id '../x': use letters, digits"),
    (["--run-id", "a/b"], "--run-id 'a/b': use letters, digits"),
    (["--backend", "nope"],
     "unknown sandbox backend 'nope' (known: docker, local; or package.module:factory)"),
    (["-c", "0"], "--concurrency: input should be greater than or equal to 1 (got 0)"),
    (["--attempts", "0"], "--attempts: input should be greater than or equal to 1 (got 0)"),
])
def test_bad_run_options_write_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    runs = tmp_path / "runs"
    res = _cli_here("run", "-s", "starter", "-t", "log-level-counts", "--store", str(runs), *args)
    assert res.exit_code == 2, res.output  # an exception escaping the CLI would be exit code 1
    assert message in " ".join(res.stderr.split())
    assert "Traceback" not in res.output and "pydantic" not in res.output
    assert not runs.exists()
    assert not (tmp_path / "x").exists()


def test_an_unbuildable_environment_is_refused_or_fails_the_run(tmp_path: Path) -> None:
    """An instruction the local backend cannot build is refused before the run (file and line);
    a failing RUN step is found while environments are built, before any trial, and the run
    exits 1 with the builder's last lines while the other tasks still run."""
    suite = tmp_path / "suite"
    make_task(suite, "odd", dockerfile="FROM debian:trixie\nHEALTHCHECK CMD true\n"
                                        "ADD https://example.org/tool.tgz /opt/\n")
    runs = tmp_path / "runs"
    refused = _cli_here("run", "-s", str(suite), "-a", "oracle", "--store", str(runs))
    assert refused.exit_code == 2, refused.output
    assert "odd/environment/Dockerfile:3: ADD from a URL (https://example.org/tool.tgz) is not " \
        "supported by the local backend" in " ".join(refused.stderr.split())
    assert not runs.exists()

    suite2 = tmp_path / "suite2"
    make_task(suite2, "broken", dockerfile="FROM debian:trixie\nRUN echo no-such-step-ok && "
                                            "exit 3\n")
    make_task(suite2, "fine")
    r = _cli("run", "-s", str(suite2), "-a", "oracle", "--store", str(runs), "--run-id", "b")
    assert r.returncode == 1, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert "1 environment failed to build" in err
    assert "no-such-step-ok" in err
    with Store.open(runs) as st:
        final = {t.task_id: t for t in st.latest_completed_trials("b")}
        tries = st.trials("b")
    assert final["fine"].status is TrialStatus.PASSED
    assert final["broken"].status is TrialStatus.INFRA_INVALID
    assert len([t for t in tries if t.task_id == "broken"]) == 1  # not retried


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    """Security review 3: run.lock -> a host file (a run directory someone else can write) had
    that file truncated and overwritten by the runner."""
    from agentmeter.runner.lock import LOCK_NAME, RunLock

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(victim)
    with pytest.raises(OSError), RunLock(run_dir, "r"):
        pass
    assert victim.read_text() == "precious\n"

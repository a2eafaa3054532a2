"""Session fixtures for tests that need a Docker daemon: one is started when none answers (and
stopped at the end of the session only if this session started it).

Under pytest-xdist the workers share one daemon: the first worker that needs it starts it while
holding a lock, records its pid in the run's directory, and the controller stops it at the end of
the run (``stop_shared_dockerd``, called from conftest's ``pytest_unconfigure``).

Use: ``from docker_fixtures import docker_backend_fixture, docker_daemon_fixture`` in a test
module; the fixtures are named ``docker_backend`` and ``docker_daemon``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proclife import identity, running

from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.dockercli import OWNER_LABEL, owner_label
from agentmeter.sandbox.dockerd import DockerDaemon, ensure_dockerd
from agentmeter.sandbox.spec import SandboxError

#: set by the controller of an xdist run (conftest): the directory the workers share
RUN_DIR_ENV = "AGENTMETER_TEST_RUN_DIR"


def shared_dir() -> Path | None:
    """The run's shared directory when this is an xdist worker."""
    d = os.environ.get(RUN_DIR_ENV)
    return Path(d) if d and os.environ.get("PYTEST_XDIST_WORKER") else None


def _ensure_shared(shared: Path) -> DockerDaemon:
    """One worker at a time checks for a daemon and starts it when none answers."""
    with open(shared / "dockerd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        daemon = ensure_dockerd()
        if daemon.started and daemon.proc is not None:
            record_daemon(shared / "dockerd.pid", daemon.proc.pid)
        return daemon


#: the files in the run's directory naming a daemon a worker started: the session's, and
#: agentmeter's own remapped one (tests/test_docker_userns.py)
SHARED_PID_FILES = ("dockerd.pid", "dockerd-userns.pid")


def record_daemon(pid_file: Path, pid: int) -> None:
    """``pid_file`` names the daemon ``pid`` by pid and start time: the controller stops it at
    the end of the run, when the pid alone may name another process (the daemon may have died
    and its pid been reused; a full suite starts many thousands of processes)."""
    found = identity(pid)
    if found is not None:
        pid_file.write_text(f"{found[0]} {found[1]}")


def stop_shared_dockerd(shared: Path, timeout: float = 20) -> None:
    """The controller's end of an xdist run: stop the daemons workers started, if any."""
    for name in SHARED_PID_FILES:
        _stop_recorded(shared / name, timeout)


def _stop_recorded(pid_file: Path, timeout: float) -> None:
    if not pid_file.exists():
        return
    pid_text, started = pid_file.read_text().split()
    pid = int(pid_text)
    pid_file.unlink()
    if not running(pid, started):
        return  # gone already: the pid may name another process by now
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(pid, started):
            return
        time.sleep(0.2)
    if running(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session", name="docker_daemon")
def docker_daemon_fixture() -> Iterator[DockerDaemon]:
    shared = shared_dir()
    try:
        daemon = _ensure_shared(shared) if shared is not None else ensure_dockerd()
    except SandboxError as e:
        reason = f"no Docker daemon could be started: {e}"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    if daemon.started:
        print(f"\nstarted dockerd {' '.join(daemon.flags)} (log: {daemon.log_path})",
              file=sys.stderr)
    yield daemon
    # containers this session left behind (a failed test may not have stopped its sandbox)
    mine = f"label={OWNER_LABEL}={owner_label()}"
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", mine],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True)
    if shared is None:
        daemon.stop()  # under xdist the controller stops it when every worker is done


@pytest.fixture(scope="session", name="docker_backend")
def docker_backend_fixture(docker_daemon: DockerDaemon) -> DockerBackend:
    return DockerBackend()

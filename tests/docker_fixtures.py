"""Session fixtures for tests that need a Docker daemon: one is started when none answers (and
stopped at the end of the session only if this session started it).

Use: ``from docker_fixtures import docker_backend_fixture, docker_daemon_fixture`` in a test
module; the fixtures are named ``docker_backend`` and ``docker_daemon``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from agentmeter.sandbox.docker import OWNER_LABEL, DockerBackend, owner_label
from agentmeter.sandbox.dockerd import DockerDaemon, ensure_dockerd
from agentmeter.sandbox.spec import SandboxError


@pytest.fixture(scope="session", name="docker_daemon")
def docker_daemon_fixture() -> Iterator[DockerDaemon]:
    try:
        daemon = ensure_dockerd()
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
    daemon.stop()


@pytest.fixture(scope="session", name="docker_backend")
def docker_backend_fixture(docker_daemon: DockerDaemon) -> DockerBackend:
    return DockerBackend()

"""Shared fixtures. Tests use real components: real bubblewrap sandboxes, real SQLite, real
dockerd (started by the session when none runs). The only test double is the scripted model."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

# session fixtures ``docker_daemon`` and ``docker_backend`` (dockerd started when none runs)
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401

from agentmeter.sandbox.local import LocalBackend

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SRC = Path(__file__).resolve().parent.parent / "src"

# subprocesses (``python -m agentmeter.cli …``) import the source tree, as pytest itself does
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


@pytest.fixture(scope="session")
def local_backend() -> Iterator[LocalBackend]:
    if os.geteuid() != 0:
        warnings.warn("tests run as an ordinary user: local sandboxes run rootless", stacklevel=1)
    yield LocalBackend(progress=None)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

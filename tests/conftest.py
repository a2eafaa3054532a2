"""Shared fixtures. Tests use real components: real bubblewrap sandboxes, real SQLite, real
dockerd (started by the session when none runs). The only test double is the scripted model."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

# session fixtures ``docker_daemon`` and ``docker_backend`` (dockerd started when none runs)
from docker_fixtures import (  # noqa: F401
    RUN_DIR_ENV,
    docker_backend_fixture,
    docker_daemon_fixture,
    stop_shared_dockerd,
)

from agentmeter.sandbox.local import LocalBackend

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SRC = Path(__file__).resolve().parent.parent / "src"

# subprocesses (``python -m agentmeter.cli …``) import the source tree, as pytest itself does
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


#: set on the controller when it made the shared directory
_OWN_RUN_DIR = pytest.StashKey[bool]()


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller of an xdist run makes the directory its workers share (inherited through
    the environment): the one Docker daemon of the run is recorded there."""
    if _is_controller(config) and RUN_DIR_ENV not in os.environ:
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="agentmeter-tests-")
        config.stash[_OWN_RUN_DIR] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_controller(config) and config.stash.get(_OWN_RUN_DIR, False):
        shared = Path(os.environ.pop(RUN_DIR_ENV))
        stop_shared_dockerd(shared)
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="session")
def local_backend() -> Iterator[LocalBackend]:
    if os.geteuid() != 0:
        warnings.warn("tests run as an ordinary user: local sandboxes run rootless", stacklevel=1)
    yield LocalBackend(progress=None)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

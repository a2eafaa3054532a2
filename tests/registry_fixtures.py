"""A real OCI registry (Docker's ``registry``, Debian package ``docker-registry``) on
127.0.0.1:<free port>, started by the test setup and stopped after; its storage is a temporary
directory. dockerd treats 127.0.0.0/8 registries as insecure, so plain HTTP works.

When the registry is not installed and we are root it is installed with apt first, as a fresh
Debian machine would need. (Where the system's policy allows, the package also enables its own
service on port 5000; the fixture neither uses nor stops that one.)

Use: ``from registry_fixtures import registry_fixture`` in a test module; the fixture is named
``registry`` and gives the ``host:port`` to prefix image names with.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from proclife import end

from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.spec import SandboxError

CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def _binary() -> str | None:
    return shutil.which("docker-registry") or shutil.which("registry")


def _ensure_installed() -> str:
    # the project's installer (one install across parallel test sessions and trials)
    with contextlib.suppress(SandboxError):
        ensure_tools({"docker-registry": "docker-registry"}, "the OCI registry tests",
                     find=lambda _: _binary())
    found = _binary()
    if found is None:
        pytest.fail("the OCI registry (Debian package docker-registry) is not installed and "
                    "cannot be installed (needs root and apt)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session", name="registry")
def registry_fixture() -> Iterator[str]:
    """``127.0.0.1:PORT`` of an empty registry this fixture owns."""
    binary = _ensure_installed()
    root = Path(tempfile.mkdtemp(prefix="agentmeter-registry-"))
    log = (root / "registry.log").open("w")
    server: subprocess.Popen[bytes] | None = None
    try:
        # the free port is released before the registry binds it: another process may take
        # it between, and then the registry exits saying so and another port is tried
        for attempt in range(5):
            port = _free_port()
            config = root / "config.yml"
            config.write_text(CONFIG.format(root=root / "storage", port=port))
            log.seek(0)
            log.truncate()
            server = subprocess.Popen([binary, "serve", str(config)], stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if _came_up(server, port, root / "registry.log"):
                break
            said = (root / "registry.log").read_text()
            assert "address already in use" in said and attempt < 4, said[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        if server is not None:
            end(server)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _came_up(server: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    """True once the registry answers on ``port``; False if it exited first."""
    deadline = time.monotonic() + 60
    while not _answers(f"http://127.0.0.1:{port}/v2/"):
        if server.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the registry did not answer in 60 s"
        time.sleep(0.1)
    # answered: by this registry, not by another server that holds the port
    assert server.poll() is None, log.read_text()[-2000:]
    return True

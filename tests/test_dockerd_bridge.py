"""The docker daemon's bridge (sandbox/dockerbridge.py): a daemon whose bridge interface was deleted
under it is repaired or named as the cause, never a pile of unexplained start failures; a
``--bridge=none`` daemon is named; a build failure's first line names the daemon's own error.
Unit level: no daemon is started or changed."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from agentmeter.sandbox import dockerbridge, dockerbuild
from agentmeter.sandbox.dockerbridge import BridgeState
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec

INSPECT = json.dumps({"Name": "bridge",
                      "Options": {"com.docker.network.bridge.name": "docker0"},
                      "IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]}})
LOST = ("docker: Error response from daemon: failed to create endpoint agentmeter-510e on network "
        "bridge: adding interface vetha012be4 to bridge docker0 failed: could not find bridge "
        "docker0: route ip+net: no such network interface.")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A host whose interfaces are a directory, with a local daemon showing INSPECT."""
    made: list[BridgeState] = []  # _make_bridge does nothing: the interface stays gone
    monkeypatch.setattr(dockerbridge, "_INTERFACES", tmp_path)
    monkeypatch.setattr(dockerbridge, "_local_daemon", lambda: True)
    monkeypatch.setattr(dockerbridge, "_inspect_bridge",
                        lambda: dockerbridge.parse_bridge_inspect(0, INSPECT))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(dockerbridge, "_make_bridge", made.append)
    monkeypatch.setattr(dockerbridge, "_BRIDGE_UNUSABLE", None)
    return {"dir": tmp_path, "made": made}


def test_inspect_is_read_and_problems_name_their_cause(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    state = dockerbridge.parse_bridge_inspect(0, INSPECT)
    assert state == BridgeState(exists=True, name="docker0", addresses=("172.17.0.1/16",))
    monkeypatch.setattr(dockerbridge, "_INTERFACES", tmp_path)
    lost = dockerbridge.bridge_problem(state)
    assert lost is not None and "bridge docker0 is gone" in lost
    (tmp_path / "docker0").mkdir()
    assert dockerbridge.bridge_problem(state) is None
    none = dockerbridge.bridge_problem(dockerbridge.parse_bridge_inspect(1, ""))
    assert none is not None and "--bridge=none" in none


def test_a_lost_bridge_is_made_again(host: dict[str, object],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = host["dir"]
    assert isinstance(root, Path)
    made: list[BridgeState] = []

    def make(state: BridgeState) -> None:
        made.append(state)
        (root / state.name).mkdir()

    monkeypatch.setattr(dockerbridge, "_make_bridge", make)
    assert dockerbridge.check_bridge() is None
    assert [s.addresses for s in made] == [("172.17.0.1/16",)]
    assert dockerbridge.bridge_refusal() is None


def test_an_unrepairable_bridge_refuses_network_builds_with_its_cause(
        host: dict[str, object]) -> None:
    problem = dockerbridge.check_bridge()  # _make_bridge does nothing here: the interface stays gone
    assert problem is not None and "could not find bridge docker0" in problem
    assert dockerbridge.bridge_refusal() == problem
    layer = LayerSpec(kind="script", source="true", origin="environment/setup.sh")
    with pytest.raises(LayerBuildError, match="environment/setup.sh: the Docker daemon's bridge "
                       "docker0 is gone"):
        asyncio.run(dockerbuild.build_layer(layer, "parent", "tag", []))


def test_a_build_that_lost_the_bridge_is_retried_once_after_the_repair(
        host: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    root = host["dir"]
    assert isinstance(root, Path)
    monkeypatch.setattr(dockerbridge, "_make_bridge", lambda state: (root / state.name).mkdir())
    calls: list[str] = []

    async def script_layer(layer: LayerSpec, parent: str, tag: str, labels: list[str]) -> None:
        calls.append(tag)
        if len(calls) == 1:
            raise LayerBuildError(dockerbuild.build_failure("setup.sh", "layer script failed (exit 1)",
                                                        LOST))

    monkeypatch.setattr(dockerbuild, "build_script_layer", script_layer)
    layer = LayerSpec(kind="script", source="true", origin="setup.sh")
    asyncio.run(dockerbuild.build_layer(layer, "parent", "tag", []))
    assert calls == ["tag", "tag"]


@pytest.mark.parametrize(("output", "cause"), [
    ("Step 3/5 : RUN pip install x\n ---> Running in 1\nCollecting x\nERROR: Could not install "
     "packages due to an OSError: [Errno 28] No space left on device\nThe command '/bin/sh -c "
     "pip install x' returned a non-zero code: 1",
     "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"),
    ("Step 1/4 : FROM python:3.12-slim\nGet \"https://registry-1.docker.io/v2/\": dial tcp: "
     "lookup registry-1.docker.io on 10.0.0.1:53: no such host",
     "Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io on "
     "10.0.0.1:53: no such host"),
    ("Step 2/2 : RUN true\nError response from daemon: failed to create shim task: OCI runtime "
     "create failed", "failed to create shim task: OCI runtime create failed"),
    (LOST, None),
    ("Step 2/2 : RUN false\nThe command '/bin/sh -c false' returned a non-zero code: 1", None),
])
def test_a_build_failure_names_the_daemon_error_first(output: str, cause: str | None) -> None:
    first = dockerbuild.build_failure("Dockerfile:3: RUN x", "docker build failed", output) \
        .splitlines()[0]
    if output is LOST:
        assert first.endswith("could not find bridge docker0: route ip+net: no such network "
                              "interface.")
    elif cause is None:
        assert first == "Dockerfile:3: RUN x: docker build failed"
    else:
        assert first == f"Dockerfile:3: RUN x: docker build failed: {cause}"


def test_only_a_daemon_in_this_network_namespace_is_repaired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2375")
    assert not dockerbridge._local_daemon()  # a remote daemon: its docker0 is not this host's
    monkeypatch.delenv("DOCKER_HOST")
    pidfile = tmp_path / "docker.pid"
    monkeypatch.setattr(dockerbridge, "DEFAULT_PIDFILE", pidfile)
    assert not dockerbridge._local_daemon()  # no pid: not known to be here
    pidfile.write_text(f"{os.getpid()}\n")
    assert dockerbridge._local_daemon()

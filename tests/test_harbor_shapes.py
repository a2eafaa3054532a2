"""Every shape of Harbor and Terminal-Bench task (tests/harbor_shapes.py) through `tasks check`
on both backends: those that need nothing agentmeter lacks pass their oracle and fail nop; those
asking for what cannot be honoured are skipped with their reason; run with ``--network-default
none``, one needing a network it never asked for fails, saying so (the run's default named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import write_shapes
from typer.testing import CliRunner

from agentmeter.cli import app


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_every_shape_loads_and_checks(tmp_path: Path, backend: str,
                                      request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_daemon")
    expect = write_shapes(tmp_path / "shapes")
    # offline: the shapes state no network, so the run's --network-default none is theirs
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "shapes"), "--json",
                                   "--network-default", "none",
                                   "--backend", backend, "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    skipped = {k["task"]: " ".join(k["problems"]) for k in out["skipped"]}
    assert set(skipped) == {t for t, e in expect.items() if e == "skip"}, skipped
    assert "environment.gpus" in skipped["gpu"]
    assert out["trivial"] == [], out
    network = {t for t, e in expect.items() if e == "network"}
    assert set(out["broken"]) == network, out
    for t in network:
        assert "--network-default none" in out["reasons"][t], out["reasons"][t]
    passing = [t for t, e in expect.items() if e == "pass"]
    assert out["ran"] == len(passing) + len(network)
    assert len(passing) / (len(passing) + len(network)) >= 0.9

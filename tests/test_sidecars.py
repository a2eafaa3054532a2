"""Compose sidecars (tasks/compose.py, runner/sidecars.py): the compose file as read, the
healthcheck and depends_on timing, a sidecar's network attacked from inside (it reaches no more
of the host than the main sandbox), and Harbor's ``sidecar-artifacts`` example run with oracle
and nop on the local backend."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_hostile_network import SECRET, _host_addresses, _probe, _Server
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.runner import sidecars
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.sandbox.spec import ExecResult, SandboxError, SandboxSpec
from agentmeter.tasks.compose import duration_s, healthcheck, read_compose
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.models import Healthcheck
from agentmeter.tasks.native import load_native_task

CORPUS = Path(os.environ.get("AGENTMETER_HARBOR_CORPUS",
                             Path(__file__).resolve().parents[2] / "shared" / "corpora"
                             / "harbor-examples"))

TOML = """version = "1.0"
artifacts = [{ source = "/var/log/x.log", service = "api" }]
[[verifier.collect]]
service = "api"
command = "true"
"""


def _task(tmp: Path, compose: str, toml: str = TOML, name: str = "t") -> Path:
    d = tmp / name
    for rel, text in {"task.toml": toml, "instruction.md": "do it\n",
                      "tests/test.sh": "exit 0\n", "environment/Dockerfile": "FROM debian\n",
                      "environment/api/Dockerfile": "FROM debian\nCMD [\"sleep\", \"1\"]\n",
                      "environment/docker-compose.yaml": compose}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


# -- the compose file as read ---------------------------------------------------------------


def test_durations_and_healthcheck_forms() -> None:
    assert [duration_s(v) for v in ("2s", "1m30s", "500ms", 7, "1h")] == [2, 90, 0.5, 7, 3600]
    with pytest.raises(ValueError):
        duration_s("soon")
    hc = healthcheck({"test": ["CMD", "curl", "-sf", "http://localhost:8000/a b"],
                      "interval": "2s", "timeout": "5s", "retries": 15, "start_period": "3s"})
    assert hc == Healthcheck(command="curl -sf 'http://localhost:8000/a b'", interval_s=2,
                             timeout_s=5, start_period_s=3, start_interval_s=2, retries=15)
    assert healthcheck({"test": ["CMD-SHELL", "pg_isready || exit 1"]}) == Healthcheck(
        command="pg_isready || exit 1", interval_s=30, timeout_s=30, start_interval_s=30)
    assert healthcheck({"test": ["NONE"]}) is None
    assert healthcheck({"test": "true", "disable": True}) is None


def test_harbor_sidecar_artifacts_loads() -> None:
    if not (CORPUS / "sidecar-artifacts").is_dir():
        pytest.skip(f"Harbor's example corpus is not at {CORPUS}")
    task = load_native_task(CORPUS / "sidecar-artifacts")
    (api,) = task.sidecars
    assert (api.name, api.context, task.main_depends_on) == (
        "api", CORPUS / "sidecar-artifacts" / "environment" / "api-server",
        {"api": "service_healthy"})
    assert sidecars.service_argv(api) == ["python", "/server.py"]
    assert [a.service for a in task.artifacts] == ["api", "api"]
    assert [h.service for h in task.collect] == ["api"]


def test_start_order_main_overrides_and_refusals(tmp_path: Path) -> None:
    compose = """services:
  main:
    depends_on: {api: {condition: service_healthy}}
    environment: [A=1]
  api:
    build: {context: ./api}
    depends_on: [db]
    command: python -m http.server
    ports: ["8000:8000"]
    networks: [x]
  db:
    image: postgres:16
"""
    task = load_native_task(_task(tmp_path, compose))
    assert [s.name for s in task.sidecars] == ["db", "api"]
    assert task.sidecars[1].command == ("python", "-m", "http.server")
    assert sidecars.service_argv(task.sidecars[1]) == ["python", "-m", "http.server"]
    notes = " ".join(task.loader_notes)
    assert "services.main.environment" in notes and "services.api: ignored: networks" in notes
    cycle = _task(tmp_path, "services:\n  a: {image: x, depends_on: [b]}\n"
                  "  b: {image: x, depends_on: [a]}\n  api: {image: x}\n", name="cycle")
    with pytest.raises(TaskError, match="cycle"):
        load_native_task(cycle)
    unknown = _task(tmp_path, "services:\n  main: {depends_on: [nope]}\n  api: {image: x}\n",
                    name="unknown")
    with pytest.raises(TaskError, match="no service 'nope'"):
        load_native_task(unknown)
    no_api = _task(tmp_path, "services:\n  other: {image: x}\n", name="no-api")
    with pytest.raises(TaskError, match=r"artifacts\[0\]\.service: 'api': no such service"):
        load_native_task(no_api)
    assert read_compose(tmp_path / "nowhere") == ([], {}, [], [])
    # security review 2: a sidecar's Dockerfile named outside the task (absolute, '..', a
    # link) was read by the runner as root: /etc/shadow as the Dockerfile
    for i, where in enumerate(("/etc/passwd", "../../../../../../../../etc/passwd", "link")):
        outside = _task(tmp_path, "services:\n  api:\n    build: {context: ., dockerfile: "
                        f"'{where}'}}\n", name=f"outside{i}")
        (outside / "environment" / "link").symlink_to("/etc/passwd")
        with pytest.raises(TaskError, match="build.dockerfile: .* lies outside the task"):
            load_native_task(outside)


# -- healthcheck and depends_on timing --------------------------------------------------------


class _FakeBox:
    """Answers a healthcheck with failures until ``ok_after`` tries."""

    id = "fake"

    def __init__(self, ok_after: int | None) -> None:
        self.ok_after = ok_after
        self.tries = 0

    async def exec(self, cmd: str | Sequence[str], **_: Any) -> ExecResult:
        self.tries += 1
        ok = self.ok_after is not None and self.tries >= self.ok_after
        return ExecResult(exit_code=0 if ok else 7, stdout="", stderr="refused",
                          duration_s=0.0)


async def _running() -> ExecResult:
    await asyncio.sleep(60)
    raise AssertionError("a service process that never ends")


async def _waiting(tmp: Path, box: _FakeBox,
                   check: Healthcheck) -> tuple[sidecars.Sidecars, Any]:
    task = load_native_task(_task(tmp, "services:\n  main: "
                                  "{depends_on: {api: {condition: service_healthy}}}\n"
                                  "  api: {build: ./api}\n"))
    side = task.sidecars[0].model_copy(update={"healthcheck": check})
    task = task.model_copy(update={"sidecars": (side,)})
    running = sidecars.Sidecars(boxes={"api": box},  # type: ignore[dict-item]
                                jobs={"api": asyncio.ensure_future(_running())})
    return running, task


async def test_service_healthy_waits_and_counts_retries(tmp_path: Path) -> None:
    check = Healthcheck(command="probe", interval_s=0.01, timeout_s=1, start_period_s=0,
                        start_interval_s=0.01, retries=3)
    box = _FakeBox(ok_after=3)
    running, task = await _waiting(tmp_path / "1", box, check)
    await running.wait_for(task, task.main_depends_on)
    assert box.tries == 3 and running.healthy == {"api"}
    await running.wait_for(task, task.main_depends_on)  # healthy once: not checked again
    assert box.tries == 3
    never = _FakeBox(ok_after=None)
    running, task = await _waiting(tmp_path / "2", never, check)
    with pytest.raises(SandboxError, match=r"compose service 'api': .*healthcheck never passed"):
        await running.wait_for(task, task.main_depends_on)
    assert never.tries == 4  # retries + 1 counted failures
    # failures during start_period do not count
    slow = _FakeBox(ok_after=None)
    running, task = await _waiting(tmp_path / "3", slow, check.model_copy(update={"start_period_s": 0.3}))
    with pytest.raises(SandboxError):
        await running.wait_for(task, task.main_depends_on)
    assert slow.tries > 4
    for job in running.jobs.values():
        job.cancel()


# -- a sidecar's network, attacked ------------------------------------------------------------


@pytest.fixture
async def loopback_service() -> AsyncIterator[_Server]:
    srv = _Server("0.0.0.0")
    await srv.start()
    yield srv
    srv.close()


NETNS = "readlink /proc/self/ns/net"


@pytest.mark.parametrize("backend_name", [
    "local", pytest.param("docker", marks=(pytest.mark.docker, pytest.mark.slow))])
async def test_sidecar_reaches_no_more_of_the_host_than_main(
        backend_name: str, request: pytest.FixtureRequest, loopback_service: _Server) -> None:
    """A sidecar joins the main sandbox's network namespace (so it shares its loopback), and
    from it the host's loopback, addresses and gateway stay as unreachable as from main."""
    backend: SandboxBackend = request.getfixturevalue(f"{backend_name}_backend")
    main = await backend.start(SandboxSpec(network="full"))
    try:
        side = await backend.start(SandboxSpec(join_network=main.id))
        try:
            same = [(await b.exec(NETNS, user="root")).stdout for b in (main, side)]
            got = await _probe(side, loopback_service.port,
                               ["127.0.0.1", *_host_addresses()], "root")
        finally:
            await side.stop()
        from_main = await _probe(main, loopback_service.port,
                                 ["127.0.0.1", *_host_addresses()], "root")
    finally:
        await main.stop()
    assert same[0] == same[1] and same[0].startswith("net:"), same
    assert len(got) >= 3, got
    leaked = {a: v for a, v in got.items() if SECRET.decode() in v}
    assert not leaked, f"a host service reached from a sidecar: {leaked}"
    assert not any(SECRET.decode() in v for v in from_main.values())
    if backend_name == "local":
        with pytest.raises(SandboxError, match="not running"):
            await backend.start(SandboxSpec(join_network=main.id))


# -- Harbor's example, end to end -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "sidecar-artifacts").is_dir(),
                    reason=f"Harbor's example corpus is not at {CORPUS}")
def test_harbor_sidecar_artifacts_oracle_passes_nop_fails(tmp_path: Path) -> None:
    """The api sidecar is built, started and healthy before the oracle; its log and the collect
    hook's snapshot reach the separate verifier at their paths: oracle passes, nop does not."""
    res = CliRunner().invoke(app, ["tasks", "check", str(CORPUS / "sidecar-artifacts"),
                                   "--json", "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert (out["tasks"], out["ran"], out["broken"], out["trivial"], out["skipped"]) == \
        (1, 1, [], [], []), out


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.skipif(not (CORPUS / "sidecar-artifacts").is_dir(),
                    reason=f"Harbor's example corpus is not at {CORPUS}")
def test_harbor_sidecar_artifacts_on_docker(docker_daemon: object, tmp_path: Path) -> None:
    """The same on docker: the sidecar is a container in the main container's network."""
    res = CliRunner().invoke(app, ["tasks", "check", str(CORPUS / "sidecar-artifacts"),
                                   "--backend", "docker", "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert (out["tasks"], out["ran"], out["broken"], out["trivial"], out["skipped"]) == \
        (1, 1, [], [], []), out

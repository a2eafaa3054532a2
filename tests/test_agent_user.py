"""Harbor's agent user (issue 27, cause 1): a Harbor task's agent and oracle run as ``[agent]
user``, else as the image's final ``USER``, else as root -- the sandbox's root, unprivileged
outside; agentmeter's own suites keep uid 1000 (``[agent] sandbox_account = true``). The
containment of a root agent is the hostile battery's (tests/test_hostile_battery.py,
``test_hostile_battery_local_root_agent``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.sandbox.accounts import ROOT_ACCOUNT, SANDBOX_ACCOUNT, Account, resolve, user_value
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.sandbox.spec import (
    AGENT_USER,
    IMAGE_USER,
    LayerBuildError,
    LayerSpec,
    SandboxError,
    SandboxSpec,
)
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.native import load_native_task
from agentmeter.tasks.suite import load_suite

PASSWD = ("root:x:0:0:root:/root:/bin/bash\n"
          "bob:x:1234:1300:Bob:/home/bob:/bin/bash\n"
          "nohome:x:1500:1500::::\n")
GROUP = "root:x:0:\nstaff:x:50:bob,carol\nbobs:x:1300:\ndev:x:1400:carol,bob\n"


def test_user_values_resolve_to_accounts() -> None:
    assert resolve(None) == SANDBOX_ACCOUNT
    for value in ("", "root", "0", "0:0"):
        assert resolve(value) == ROOT_ACCOUNT
    assert resolve("bob", PASSWD, GROUP) == Account(1234, 1300, "/home/bob", "bob", (50, 1400))
    assert resolve("1234", PASSWD, GROUP) == Account(1234, 1300, "/home/bob", "bob", (50, 1400))
    assert resolve("bob:dev", PASSWD, GROUP) == Account(1234, 1400, "/home/bob", "bob")
    assert resolve("bob:77", PASSWD, GROUP) == Account(1234, 77, "/home/bob", "bob")
    # a uid /etc/passwd does not know: gid 0, home / (Docker's defaults)
    assert resolve("4321", PASSWD, GROUP) == Account(4321, 0, "/", "4321")
    assert resolve("nohome", PASSWD, GROUP).home == "/"
    with pytest.raises(SandboxError, match="unable to find user carol"):
        resolve("carol", PASSWD, GROUP)
    with pytest.raises(SandboxError, match="unable to find group nope"):
        resolve("bob:nope", PASSWD, GROUP)
    assert user_value(IMAGE_USER, None) == "root" and user_value(IMAGE_USER, "bob") == "bob"
    assert user_value("alice", "bob") == "alice" and user_value(None, "bob") is None


def _task(root: Path, name: str, *, toml: str = "", dockerfile: str, solve: str,
          cond: str) -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text('schema_version = "1.1"\n' + toml +
                                 '[environment]\nnetwork_mode = "no-network"\n')
    (d / "instruction.md").write_text(f"{name}\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{solve}\n")
    (d / "tests" / "test.sh").write_text(
        f"#!/bin/bash\nif {cond}; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d


def test_the_loader_gives_harbor_tasks_harbors_user(tmp_path: Path) -> None:
    common = {"dockerfile": "FROM debian:trixie\n", "solve": "true", "cond": "true"}
    assert load_native_task(_task(tmp_path, "none", **common)).agent_user == IMAGE_USER
    assert load_native_task(_task(tmp_path, "root", toml='[agent]\nuser = "root"\n',
                                  **common)).agent_user == "root"
    assert load_native_task(_task(tmp_path, "uid", toml='[agent]\nuser = 1234\n',
                                  **common)).agent_user == "1234"
    own = _task(tmp_path, "own", toml="[agent]\nsandbox_account = true\n", **common)
    assert load_native_task(own).agent_user is None
    bad = _task(tmp_path, "bad", toml='[agent]\nsandbox_account = true\nuser = "bob"\n', **common)
    with pytest.raises(TaskError, match="agent.user"):
        load_native_task(bad)


def test_builtin_suites_keep_the_sandbox_account() -> None:
    suites = Path(__file__).parents[1] / "src" / "agentmeter" / "tasks" / "suites"
    for name in ("starter", "clitools", "agency"):
        assert {t.agent_user for t in load_suite(suites / name).tasks} == {None}, name


async def test_local_agent_exec_is_the_image_user(local_backend: LocalBackend) -> None:
    """The exec user 'agent' is the resolved account: root (HOME /root, into a 0700 /root),
    or a named one (its uid, gid, groups and home); an unknown name refuses the sandbox."""
    sb = await local_backend.start(SandboxSpec(agent_user=IMAGE_USER, workdir="/root"))
    try:
        r = await sb.exec('echo "$(id -u) $HOME $USER $(pwd)"', user=AGENT_USER)
        assert r.stdout.split() == ["0", "/root", "root", "/root"], r.stderr
    finally:
        await sb.stop()
    sb = await local_backend.start(SandboxSpec(agent_user="nobody:nogroup"))
    try:
        r = await sb.exec('echo "$(id -u) $(id -g) $USER"', user=AGENT_USER)
        assert r.stdout.split() == ["65534", "65534", "nobody"], r.stderr
    finally:
        await sb.stop()
    with pytest.raises(SandboxError, match="unable to find user no-such-user"):
        await local_backend.start(SandboxSpec(agent_user="no-such-user"))


#: RUN after ``USER bob`` runs as bob (uid, gid, HOME, the files it makes), as docker build
#: runs it; ``USER root`` again, as root; the image keeps the last USER
_AFTER_USER = ("FROM debian:trixie\nRUN useradd -m -u 1234 bob\nUSER bob\n"
               "RUN echo \"$(id -u):$(id -g) $HOME\" > /tmp/bob && touch /tmp/bob-made # {n}\n"
               "USER root\nRUN touch /tmp/root-made\nUSER bob\n")
_AFTER_USER_SEEN = ["1234:1234 /home/bob", "1234", "0"]


async def _run_steps_after_user(backend: SandboxBackend, tmp_path: Path) -> list[str]:
    text = _AFTER_USER.replace("{n}", str(time.time_ns()))  # built afresh each time
    layer = LayerSpec(kind="dockerfile", source=text, origin="u/Dockerfile", context=tmp_path,
                      network="none")
    sb = await backend.start(SandboxSpec(layers=(layer,), agent_user=IMAGE_USER))
    try:
        r = await sb.exec("cat /tmp/bob; stat -c %u /tmp/bob-made /tmp/root-made", user="root")
        return r.stdout.splitlines()
    finally:
        await sb.stop()


async def test_local_run_after_user_runs_as_that_user(local_backend: LocalBackend,
                                                      tmp_path: Path) -> None:
    """Dockerfile RUN steps after ``USER bob`` (was: uid 1000, HOME /home/agent)."""
    assert await _run_steps_after_user(local_backend, tmp_path) == _AFTER_USER_SEEN
    layer = LayerSpec(kind="dockerfile", origin="u/Dockerfile", context=tmp_path,
                      source=f"FROM debian:trixie\nUSER nosuch\nRUN true # {time.time_ns()}\n")
    with pytest.raises(LayerBuildError, match="unable to find user nosuch"):  # as docker build
        await local_backend.start(SandboxSpec(layers=(layer,)))


@pytest.mark.slow
async def test_docker_run_after_user_agrees(docker_backend: DockerBackend,
                                            tmp_path: Path) -> None:
    """The same Dockerfile on docker (docker build's own semantics): the same answers."""
    assert await _run_steps_after_user(docker_backend, tmp_path) == _AFTER_USER_SEEN


def test_cli_and_native_agents_use_the_accounts_home() -> None:
    """A CLI agent's HOME, config files and state, and the native agent's memory bank, are in
    the HOME of the account the agent runs as (was: /home/agent for a root agent too)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from agentmeter.agents.base import GatewayEndpoint
    from agentmeter.agents.cli.agent import InstalledCliAgent
    from agentmeter.agents.native.tools import ToolBox
    from agentmeter.agents.registry import make_agent

    bob = Account(1234, 1300, "/home/bob", "bob")
    for account, home in ((ROOT_ACCOUNT, "/root"), (bob, "/home/bob"),
                          (SANDBOX_ACCOUNT, "/home/agent")):
        box = SimpleNamespace(account=account, workdir="/app")
        ctx = cast(Any, SimpleNamespace(
            sandbox=box, task=SimpleNamespace(workdir="/app"), instruction="x",
            gateway=GatewayEndpoint(base_url="http://127.0.0.1:1", token="t", model="m/m")))
        for name in ("gemini-cli", "codex"):
            agent = make_agent(name)
            assert isinstance(agent, InstalledCliAgent)
            v = agent.values(ctx)
            assert (v["home"], v["state"]) == (home, f"{home}/.agentmeter/{name}"), name
        tools = ToolBox(cast(Any, box), "/app", max_output_chars=100, shell_timeout_s=1)
        assert tools.memory_path == f"{home}/.agentmeter-memory.md"


async def test_as_agent_runs_as_the_agents_account(local_backend: LocalBackend,
                                                   tmp_path: Path) -> None:
    """``$AS_AGENT`` runs agent code as the account the agent ran as: a named USER's ids and
    HOME, root's for a root agent (was: uid 1000, HOME /home/agent, whatever the agent was)."""
    from agentmeter.verify.command import AS_AGENT, stage_verifier

    task = load_native_task(_task(tmp_path, "t", dockerfile="FROM debian:trixie\n",
                                  solve="true", cond="true"))
    seen = {}
    for value in ("nobody:nogroup", IMAGE_USER):
        sb = await local_backend.start(SandboxSpec(agent_user=value))
        try:
            await stage_verifier(task, sb)
            r = await sb.exec([AS_AGENT, "sh", "-c", 'echo "$(id -u) $(id -g) $HOME $USER"'],
                              user="root", cwd="/")
            seen[value] = r.stdout.strip() or r.stderr
        finally:
            await sb.stop()
    assert seen == {"nobody:nogroup": "65534 65534 /nonexistent nobody",
                    IMAGE_USER: "0 0 /root root"}, seen


@pytest.mark.slow
def test_harbor_user_probes_pass_their_oracle(tmp_path: Path) -> None:
    """The other public Harbor benchmark's shape (``WORKDIR /root``, no USER: ``bwrap: Can't
    chdir to /root``) and a named ``USER`` (hello-user's account, set by the image) pass their
    oracle on the local backend; nop passes neither."""
    suite = tmp_path / "suite"
    _task(suite, "workdir-root", dockerfile="FROM ubuntu:24.04\nWORKDIR /root\n",
          solve='echo "$(id -u) $HOME $(pwd)" > /root/who.txt',
          cond='[ "$(cat /root/who.txt)" = "0 /root /root" ]')
    _task(suite, "named-user",
          dockerfile="FROM ubuntu:24.04\nRUN useradd -m -u 1234 bob && install -d -o bob /w\n"
                     "USER bob\nWORKDIR /w\n",
          solve='echo "$(id -un) $(id -u) $HOME" > /w/who.txt',
          cond='[ "$(cat /w/who.txt)" = "bob 1234 /home/bob" ]')
    res = CliRunner().invoke(app, ["tasks", "check", str(suite), "--json", "--backend", "local",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["ran"] == 2 and out["broken"] == [] and out["trivial"] == [], out


@pytest.mark.slow
async def test_docker_root_agent_processes_are_ended(docker_backend: DockerBackend) -> None:
    """Docker, a root agent (the image's USER): the agent is uid 0 with the image's HOME;
    what it detached is killed between phases, but not the container's init, which it cannot
    signal either (PID1 handles no signal), so the verifier still gets its sandbox."""
    sb = await docker_backend.start(SandboxSpec(agent_user=IMAGE_USER))
    try:
        r = await sb.exec('echo "$(id -u) $HOME"; kill -TERM 1; kill -KILL 1; '
                          "setsid nohup bash -c 'exec -a am-root-daemon sleep 600' "
                          ">/dev/null 2>&1 & echo started", user=AGENT_USER)
        assert r.stdout.split() == ["0", "/root", "started"], r.stderr
        assert await sb.kill_user_processes(AGENT_USER) >= 1
        r = await sb.exec("grep -l 'am-root-daem[o]n' /proc/[0-9]*/cmdline; echo alive",
                          user="root")
        assert r.stdout.split() == ["alive"], r.stdout
    finally:
        await sb.stop()


def test_the_task_and_sandbox_image_user_sentinels_agree() -> None:
    """tasks/ may not import the sandbox: the loader's sentinel must be the sandbox's."""
    from agentmeter.sandbox import spec
    from agentmeter.tasks import models
    assert models.IMAGE_USER == spec.IMAGE_USER

"""A sandbox's network switched between phases (sandbox/netswitch.py), as Harbor switches it for
a verifier sharing the agent's sandbox: the proxy's new policy ends the connections it carried;
the local backend's direct path (pasta) is taken away, with a connection a process of the earlier
phase holds, and given back fenced off the host; the loader and the runner give each phase its
network (network-policy-matrix/dynamic e-a-diff, e-v-diff, shared-allowlist)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401
from outside_net import outside_service
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.network import network_label, verifier_network_label
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.runner.tasksandbox import phase_networks
from agentmeter.sandbox.hostpolicy import HostPolicy
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.netswitch import set_network
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.sandbox.proxy import PROXY_PORT, REFUSED_REASON, SandboxProxy
from agentmeter.sandbox.spec import SandboxError, SandboxSpec
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_task


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    """An echo service on the host's loopback (the port)."""
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1024):
            w.write(data)
            await w.drain()
        w.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def _connect(proxy: SandboxProxy, target: str) -> tuple[asyncio.StreamReader,
                                                              asyncio.StreamWriter, bytes]:
    r, w = await asyncio.open_unix_connection(str(proxy.socket_path))
    w.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    return r, w, await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)


async def test_a_new_policy_ends_the_tunnels_of_the_old(tmp_path: Path, echo: int) -> None:
    target = f"127.0.0.1:{echo}"
    proxy = SandboxProxy(HostPolicy([target], host_network=True), socket_path=tmp_path / "p.sock")
    await proxy.start()
    try:
        r, w, head = await _connect(proxy, target)
        assert head.startswith(b"HTTP/1.1 200"), head
        w.write(b"ping")
        assert await asyncio.wait_for(r.read(4), 5) == b"ping"
        proxy.set_policy(HostPolicy(()))  # the next phase: no network
        w.write(b"again")
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            got = await asyncio.wait_for(r.read(5), 5)
            assert got != b"again", "a tunnel of the earlier phase still carries traffic"
            raise ConnectionError("closed")  # read() gave b"": the tunnel was ended
        w.close()
        _, w2, head = await _connect(proxy, target)
        assert head.startswith(f"HTTP/1.1 403 {REFUSED_REASON}".encode()), head
        w2.close()
    finally:
        await proxy.stop()


@pytest.fixture
def outside_echo() -> Iterator[tuple[str, str, int]]:
    """A stand-in for the internet (a network namespace behind a veth pair) with an echo
    service: (the host's address on the pair, the service's address, its port)."""
    code = ("import socket,sys,threading\ns=socket.socket();s.bind((sys.argv[1],0));s.listen()\n"
            "print(s.getsockname()[1],flush=True)\n"
            "def echo(c):\n while d:=c.recv(1024): c.sendall(d)\n"
            "while True: threading.Thread(target=echo,args=(s.accept()[0],),daemon=True).start()\n")
    with outside_service(code, "amsw", 232) as where:
        yield where


#: a process of the earlier phase: one connection, a line through it every 0.1 s, each echo logged
HOLDER = r"""
exec 3<>"/dev/tcp/$0/$1" || exit 1
while :; do echo ping >&3 || exit; read -t 1 line <&3 && echo "$line" >> /tmp/held.log; sleep 0.1; done
"""
#: a fresh connection: its first echo, else "unreachable"
FRESH = r"""timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && echo fresh >&3 && head -1 <&3' "$0" "$1" \
  2>/dev/null || echo unreachable"""


async def _lines(sb: object, user: str = "root") -> int:
    r = await sb.exec(["sh", "-c", "cat /tmp/held.log 2>/dev/null | wc -l"], user=user)  # type: ignore[attr-defined]
    return int(r.stdout.strip() or 0)


async def _prove_switch(sb: Any, host_ip: str, far_ip: str, port: int) -> None:
    """Public, then no network, then public again, on a sandbox started public and switchable."""
    # a process of the agent phase (public), still running, holds a connection
    holder = asyncio.ensure_future(sb.exec(["bash", "-c", HOLDER, far_ip, str(port)],
                                           user="root", timeout=60))
    try:
        await _switches(sb, host_ip, far_ip, port)
    finally:
        holder.cancel()
        with contextlib.suppress(BaseException):
            await holder


async def _switches(sb: Any, host_ip: str, far_ip: str, port: int) -> None:
    for _ in range(100):
        if await _lines(sb) >= 2:
            break
        await asyncio.sleep(0.05)
    assert await _lines(sb) >= 2, "the agent phase's connection never carried anything"
    await sb.set_network("none")
    route = (await sb.exec(["cat", "/proc/net/route"])).stdout
    assert route.splitlines()[1:] == [], f"a route out is left: {route}"
    before = await _lines(sb)
    fresh = (await sb.exec(["bash", "-c", FRESH, far_ip, str(port)])).stdout.strip()
    assert fresh == "unreachable", fresh
    await asyncio.sleep(0.5)  # five of the holder's rounds
    assert await _lines(sb) == before, "the earlier phase's connection still carries traffic"
    # its proxy now refuses every host
    ask = (f'exec 3<>/dev/tcp/127.0.0.1/{PROXY_PORT}; printf "CONNECT {far_ip}:{port} '
           'HTTP/1.1\\r\\n\\r\\n" >&3; head -1 <&3')
    assert REFUSED_REASON in (await sb.exec(["bash", "-c", ask])).stdout
    # public again: the outside reachable, the host's own address still fenced off
    await sb.set_network("full")
    fresh = (await sb.exec(["bash", "-c", FRESH, far_ip, str(port)])).stdout.strip()
    assert fresh == "fresh", fresh
    async def hello(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"the host\n")
        await w.drain()
        w.close()
    host_service = await asyncio.start_server(hello, host_ip, 0)
    host_port = host_service.sockets[0].getsockname()[1]
    fenced = (await sb.exec(["bash", "-c", FRESH, host_ip, str(host_port)])).stdout.strip()
    host_service.close()
    assert fenced == "unreachable", fenced


@pytest.mark.skipif(os.geteuid() != 0, reason="a stand-in for the internet needs root")
async def test_local_switch_takes_the_direct_path_and_its_connections_away(
        local_backend: LocalBackend, outside_echo: tuple[str, str, int]) -> None:
    sb = await local_backend.start(SandboxSpec(network="full", network_switch=True,
                                               net_extras=True))
    try:
        await _prove_switch(sb, *outside_echo)
    finally:
        await sb.stop()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a stand-in for the internet needs root")
async def test_docker_switch_takes_the_bridge_and_its_connections_away(
        docker_backend: SandboxBackend, outside_echo: tuple[str, str, int]) -> None:
    sb = await docker_backend.start(SandboxSpec(network="full", network_switch=True,
                                                net_extras=True))
    try:
        await _prove_switch(sb, *outside_echo)
    finally:
        await sb.stop()


async def test_a_sandbox_switches_only_within_what_it_started_with(
        local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec(network="none"))
    try:
        with pytest.raises(SandboxError, match="without a network switch"):
            await sb.set_network("none")
    finally:
        await sb.stop()

    class NoSwitch:
        pass
    with pytest.raises(SandboxError, match="cannot switch"):
        await set_network(NoSwitch(), "none")


def test_each_phase_of_a_harbor_task_gets_its_network(tmp_path: Path) -> None:
    """e-a-diff: environment no-network, agent public, the shared verifier the environment's;
    shared-allowlist: each phase its own allowlist. Both were refused at load."""
    d = make_task(tmp_path, "e-a-diff")
    toml = d / "task.toml"
    base = toml.read_text().replace("sandbox_account = true\n", "")
    toml.write_text(base.replace("allow_internet = false", 'network_mode = "no-network"')
                    .replace("[agent]\n", '[agent]\nnetwork_mode = "public"\n'))
    task = load_task(d)
    assert (network_label(task), verifier_network_label(task)) == ("public", "no-network")
    assert phase_networks(task) == (("full", ()), ("none", ()))
    toml.write_text(base.replace("allow_internet = false", 'network_mode = "no-network"')
                    .replace("[agent]\n", '[agent]\nnetwork_mode = "allowlist"\n'
                             'allowed_hosts = ["example.com"]\n')
                    .replace("[verifier]\n", '[verifier]\nnetwork_mode = "allowlist"\n'
                             'allowed_hosts = ["*.iana.org"]\n'))
    task = load_task(d)
    assert phase_networks(task) == (("allowlist", ("example.com",)),
                                    ("allowlist", ("*.iana.org",)))
    toml.write_text(base.replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    assert phase_networks(load_task(d)) is None  # the same network: nothing to switch


@pytest.mark.skipif(os.geteuid() != 0, reason="a stand-in for the internet needs root")
async def test_a_trial_runs_each_phase_on_its_network(tmp_path: Path,
                                                      outside_echo: tuple[str, str, int]) -> None:
    """e-a-diff's shape, whole: the agent (public) reaches the outside, the verifier sharing its
    sandbox (the environment's no-network) does not; the trial records both networks."""
    _, far_ip, port = outside_echo
    probe = (f"timeout 3 bash -c 'exec 3<>/dev/tcp/{far_ip}/{port} && echo x >&3 && head -1 <&3'"
             " >/dev/null 2>&1 && echo reachable || echo blocked")
    d = make_task(tmp_path / "suite", "e-a-diff", solve=f"mkdir -p /logs/artifacts; {{ {probe}; }} "
                  "> /logs/artifacts/status",
                  test=f"#!/bin/bash\nmkdir -p /logs/verifier\nmine=$({probe})\n"
                  '[ "$(cat /logs/artifacts/status)" = reachable ] && [ "$mine" = blocked ] '
                  "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("sandbox_account = true\n", 'network_mode = "public"\n')
                    .replace("allow_internet = false", 'network_mode = "no-network"'))
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(tmp_path / "suite")],
                                                 agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.PASSED, (trial.status, trial.error)
    assert (trial.extra["network"], trial.extra["verifier_network"]) == ("public", "no-network")

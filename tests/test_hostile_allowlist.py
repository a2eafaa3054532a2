"""The host is never an allowlisted destination (sandbox/hostaddr.py, hostpolicy.py, proxy.py,
netsetup.py: fence_host).

A service on the host (bound on every address, dual-stack) counts the connections it accepts;
the harness's proxy is asked for it in every spelling the resolver reads (``127.1``,
``2130706433``, ``[::ffff:127.0.0.1]``, ``0``, names resolving to 127.0.0.1, …), by CONNECT and
by plain GET, under ``*``, wildcard, exact-name and public policies: none reaches it. Redirects
from an allowed upstream to the host are refused when the client follows them. A task listing
the host exactly is refused at load unless the run says ``--allow-host-network``. One trial on
the local backend, and a full-network sandbox against a host address of its own interface.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401
from taskgen import make_task
from typer.testing import CliRunner

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, RunSetupError, prepare, run
from agentmeter.sandbox import hostaddr
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.hostpolicy import HostPolicy, entries_naming_the_host
from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.pkgcache import PackageCache
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.proxy import PROXY_PORT, REFUSED_REASON, SandboxProxy, _resolve
from agentmeter.sandbox.spec import SandboxSpec
from agentmeter.store.db import Store

#: names a hostile DNS answers with the host's loopback (the proxy's resolver is replaced)
EVIL = {"evil.x": ["127.0.0.1"], "rebind.x": ["127.0.0.1", "203.0.113.9"],
        "six.x": ["::1"], "mapped.x": ["::ffff:127.0.0.1"]}
SPELLINGS = ["127.0.0.1", "127.1", "0x7f.1", "0x7f000001", "2130706433", "0177.0.0.1",
             "017700000001", "127.0.1.3", "0", "0.0.0.0", "[::1]", "[::ffff:127.0.0.1]",
             "[::ffff:7f00:1]", "[::]", "[0:0:0:0:0:0:0:1]", "localhost", "LOCALHOST.",
             "evil.x", "rebind.x", "six.x", "mapped.x"]
#: allowlists that must not reach the host: everything, wildcards, the spelling itself exactly
#: (without --allow-host-network), and public mode (None)
POLICIES = {"star": ["*"], "wildcards": ["*.x", ".x", "*.localhost"], "exact": "self",
            "public": None}


class HostService:
    """A TCP service on every host address (IPv4 and IPv6): counts what it accepts."""

    def __init__(self) -> None:
        self.accepted = 0
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::", 0))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.accepted += 1
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhost-secret")
            await w.drain()
            w.close()
        self.server = await asyncio.start_server(answer, sock=self.sock)


@pytest.fixture
async def host_service() -> AsyncIterator[HostService]:
    srv = HostService()
    await srv.start()
    yield srv
    assert srv.server is not None
    srv.server.close()


async def _evil_resolver(host: str, port: int) -> list[str]:
    return EVIL[host] if host in EVIL else await _resolve(host, port)


async def _ask(proxy: SandboxProxy, request: str) -> bytes:
    r, w = await asyncio.open_unix_connection(str(proxy.socket_path))
    w.write(request.encode())
    await w.drain()
    got = await asyncio.wait_for(r.read(), 20)
    w.close()
    return got


def _request(method: str, host: str, port: int, path: str = "/") -> str:
    if method == "CONNECT":
        return f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n"
    return f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("method", ["CONNECT", "GET"])
@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_no_spelling_of_the_host_gets_through(tmp_path: Path, host_service: HostService,
                                                    spelling: str, method: str,
                                                    policy: str) -> None:
    allowed = POLICIES[policy]
    if allowed == "self":
        allowed = [spelling, f"{spelling}:{host_service.port}"]
    proxy = SandboxProxy(HostPolicy(allowed), socket_path=tmp_path / "p.sock",
                         resolver=_evil_resolver, cache=PackageCache(tmp_path / "cache"))
    await proxy.start()
    try:
        got = await _ask(proxy, _request(method, spelling, host_service.port))
        await asyncio.sleep(0.01)  # a connection that got through is counted by now
    finally:
        await proxy.stop()
    assert host_service.accepted == 0, (spelling, method, allowed, got[:200])
    assert got.startswith(f"HTTP/1.1 403 {REFUSED_REASON}".encode()), got[:200]


async def test_the_hosts_interface_addresses_and_embeddings_are_refused(
        tmp_path: Path, host_service: HostService) -> None:
    own = [a for a in hostaddr.host_addresses() if not a.is_loopback and not a.is_link_local]
    spellings = [f"[{a}]" if a.version == 6 else str(a) for a in own]
    spellings += ["[64:ff9b::7f00:1]", "[2002:7f00:1::]", "[::7f00:1]", "[fe80::1%25lo]",
                  "169.254.169.254", "10.0.0.1", "100.64.0.1"]
    proxy = SandboxProxy(HostPolicy(["*"]), socket_path=tmp_path / "p.sock")
    await proxy.start()
    try:
        for spelling in spellings:
            for method in ("CONNECT", "GET"):
                got = await _ask(proxy, _request(method, spelling, host_service.port))
                assert got.startswith(b"HTTP/1.1 403"), (spelling, method, got[:200])
    finally:
        await proxy.stop()
    assert host_service.accepted == 0


def test_addresses_are_read_as_the_resolver_reads_them() -> None:
    for text in ("127.1", "0x7f.1", "2130706433", "0177.0.0.1", "0", "1.2.3", "0X7F.0.0.1",
                 "255.255.255.255", "256.1", "1.2.3.4.5", "08.1.1.1", "0x.1", "1..2", "a.b"):
        try:
            libc: str | None = socket.inet_ntoa(socket.inet_aton(text))
        except OSError:
            libc = None
        ours = hostaddr.parse_ipv4(text)
        assert (str(ours) if ours else None) == libc, text
    assert not hostaddr.internal("8.8.8.8") and not hostaddr.internal("2606:4700::1")
    assert not hostaddr.internal("2002:808:808::1")  # 6to4 of a public address
    own = hostaddr.host_addresses() | hostaddr.gateways()
    for text in ("203.0.113.80", "198.18.0.1", "2001:db8::1"):  # documentation, benchmarking
        ip = hostaddr.parse_ip(text)
        assert ip is not None and hostaddr.is_internal(ip) == (ip in own), text
    for text in ("::ffff:10.0.0.1", "2001:0:4136:e378:8000:63bf:80ff:fffe", "fe80::1%eth0"):
        assert hostaddr.internal(text), text


async def test_the_flag_and_an_exact_entry_reach_the_host(tmp_path: Path,
                                                          host_service: HostService) -> None:
    port = host_service.port
    cases = [(["127.0.0.1"], False, "127.0.0.1", 403), (["*"], True, "127.0.0.1", 403),
             (["*.x"], True, "evil.x", 403), ([f"127.0.0.1:{port}"], True, "127.1", 200),
             (["evil.x"], True, "evil.x", 200), (["evil.x"], False, "evil.x", 403)]
    for allowed, flag, host, status in cases:
        proxy = SandboxProxy(HostPolicy(allowed, host_network=flag), resolver=_evil_resolver,
                             socket_path=tmp_path / "p.sock")
        await proxy.start()
        try:
            got = await _ask(proxy, _request("GET", host, port))
        finally:
            await proxy.stop()
        assert got.split(b" ", 2)[1] == str(status).encode(), (allowed, flag, host, got[:200])
        if status == 403 and flag is False and allowed == ["127.0.0.1"]:
            assert b"--allow-host-network" in got
    assert host_service.accepted == 2


async def test_a_redirect_to_the_host_is_refused(tmp_path: Path,
                                                 host_service: HostService) -> None:
    """An allowed upstream answers 302 to the host; the proxy passes it on without following,
    and the client's next request (through the proxy) is refused."""
    up_port = 0

    async def redirect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(f"HTTP/1.1 302 Found\r\nLocation: http://127.1:{host_service.port}/x.deb\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        await w.drain()
        w.close()
    upstream = await asyncio.start_server(redirect, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    try:
        for allowed in (["*", f"127.0.0.1:{up_port}"], [f"127.0.0.1:{up_port}", "*.x"]):
            proxy = SandboxProxy(HostPolicy(allowed, host_network=True),
                                 socket_path=tmp_path / "p.sock",
                                 cache=PackageCache(tmp_path / "cache"))
            await proxy.start()
            try:
                for path in ("/page", f"/{secrets.token_hex(4)}/pool/x.deb"):  # relayed, cached
                    got = await _ask(proxy, _request("GET", "127.0.0.1", up_port, path))
                    assert got.startswith(b"HTTP/1.1 302"), got[:200]
                    location = next(ln.split(b": ", 1)[1] for ln in got.split(b"\r\n")
                                    if ln.lower().startswith(b"location:")).decode()
                    follow = location.split("/")[2]
                    host, _, port = follow.rpartition(":")
                    for method in ("GET", "CONNECT"):
                        again = await _ask(proxy, _request(method, host, int(port), "/x.deb"))
                        assert again.startswith(b"HTTP/1.1 403"), again[:200]
            finally:
                await proxy.stop()
    finally:
        upstream.close()
    assert host_service.accepted == 0


def _task_with_hosts(root: Path, hosts: str, test: str | None = None) -> Path:
    d = make_task(root, "hosts", test=test)
    (d / "task.toml").write_text((d / "task.toml").read_text() + f"allowed_hosts = {hosts}\n")
    return d


def test_a_task_listing_the_host_is_refused_at_load_without_the_flag(tmp_path: Path) -> None:
    assert entries_naming_the_host(["*", "*.localhost", "pypi.org", "127.1:80", "[::1]",
                                    "localhost", "http://10.0.0.5/x"]) == [
        "127.1:80", "[::1]", "localhost", "http://10.0.0.5/x"]
    task = _task_with_hosts(tmp_path, '["pypi.org", "127.0.0.1:8080"]')
    for strict in (False, True):
        with pytest.raises(RunSetupError) as e:
            prepare(RunRequest(suites=[str(task)], strict=strict))
        assert f"{task / 'task.toml'}: environment.allowed_hosts: 127.0.0.1:8080 names" in str(
            e.value) and "--allow-host-network" in str(e.value), str(e.value)
    prepared = prepare(RunRequest(suites=[str(task)], allow_host_network=True))
    assert [t.host_network for t in prepared.tasks] == [True]
    other = _task_with_hosts(tmp_path / "star", '["*", "*.example.com"]')
    assert [t.host_network for t in prepare(RunRequest(suites=[str(other)])).tasks] == [False]

    from agentmeter.cli.app import app
    for cmd in (["run"], ["tasks", "check"]):
        out = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"}).output
        assert "--allow-host-network" in out, out
    res = CliRunner().invoke(app, ["tasks", "check", str(task)], env={"COLUMNS": "200"})
    assert res.exit_code != 0 and "environment.allowed_hosts" in res.output, res.output


async def test_a_trial_with_star_does_not_reach_the_host(tmp_path: Path,
                                                         host_service: HostService) -> None:
    """End to end on the local backend: a task allowing ``*`` asks the proxy for the host."""
    port = host_service.port
    test = ("#!/bin/bash\nmkdir -p /logs/verifier\nok=1\n"
            f"for h in 127.1 2130706433 0 localhost '[::1]'; do\n"
            f"  exec 3<>/dev/tcp/127.0.0.1/{PROXY_PORT} || exit 9\n"
            f"  printf 'CONNECT %s:{port} HTTP/1.1\\r\\n\\r\\n' \"$h\" >&3\n"
            "  line=$(timeout 10 head -1 <&3); exec 3<&-\n"
            "  echo \"$h: $line\"; case $line in *403*) ;; *) ok=0;; esac\n"
            "done\necho $ok > /logs/verifier/reward.txt\n")
    suite = tmp_path / "suite"
    _task_with_hosts(suite, '["*"]', test=test)
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.PASSED, trial.error
    assert host_service.accepted == 0


@pytest.fixture
def host_interface_address() -> Iterator[str]:
    """An address of this host on an interface of its own (like docker0's): one end of a veth
    pair, both ends on the host."""
    ensure_tools({"ip": "iproute2"}, "the network tests")  # before any sandbox installed it
    name = f"amf{secrets.token_hex(3)}"
    address = f"10.233.{secrets.randbelow(250) + 1}.1"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p"],
                   check=True, capture_output=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", name], check=True)
        for dev in (name, f"{name}p"):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        yield address
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


async def _fenced_probe(sb: Sandbox, address: str, port: int) -> str:
    r = await sb.exec(["bash", "-c", 'timeout 5 bash -c "exec 3<>/dev/tcp/$0/$PORT && '
                       'head -c 100 <&3"', address], env={"PORT": str(port)}, user="root",
                      timeout=60)
    return r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="a veth pair needs root")
async def test_full_network_is_fenced_off_the_hosts_addresses(
        local_backend: LocalBackend, host_service: HostService,
        host_interface_address: str) -> None:
    """pasta carries a connection to a host address out through a socket of the host, where
    it reaches whatever the host binds on 0.0.0.0 (docker0's address, here a veth's)."""
    sb = await local_backend.start(SandboxSpec(network="full"))
    try:
        got = await _fenced_probe(sb, host_interface_address, host_service.port)
        assert sb._keeper is not None
        rules = subprocess.run(["nsenter", "-t", str(sb._keeper.pid), "-n", "ip", "rule"],
                               capture_output=True, text=True).stdout
    finally:
        await sb.stop()
    assert "host-secret" not in got, got
    assert host_service.accepted == 0
    assert f"to {host_interface_address} prohibit" in rules, rules


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="a veth pair needs root")
async def test_docker_full_network_is_fenced_off_the_hosts_addresses(
        docker_backend: DockerBackend, host_service: HostService,
        host_interface_address: str) -> None:
    """A container reaches the host through docker0's address (its gateway) and every other
    host address; all are prohibited in its namespace."""
    sb = await docker_backend.start(SandboxSpec(network="full"))
    try:
        targets = [str(a) for a in hostaddr.host_addresses()  # docker0's, the gateway, is one
                   if a.version == 4 and not a.is_loopback]
        assert host_interface_address in targets
        got = [await _fenced_probe(sb, a, host_service.port) for a in targets]
    finally:
        await sb.stop()
    assert not any("host-secret" in g for g in got), list(zip(targets, got, strict=True))
    assert host_service.accepted == 0

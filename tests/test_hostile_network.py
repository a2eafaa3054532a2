"""Full-network sandboxes (``allow_internet = true``) attacked from inside: the host's loopback
services stay out of reach on both backends, the outside is reachable, and two sandboxes that
both expose the gateway socket on the same port run side by side (local: pasta, see pasta.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from outside_net import outside_service

from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.pasta import DNS_FORWARD, resolv_conf
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import ExposedSocket, SandboxSpec

SECRET = b"host-loopback-secret"

#: connect to each address given, print what the service said (a bash builtin: no tools needed)
PROBE = r"""
for a in "$@"; do
  ( reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && head -c 100 <&3' "$a" "$PORT" 2>/dev/null)
    echo "$a: ${reply:-unreachable}" ) &
done
wait
"""

#: the default gateway inside, from /proc/net/route (no iproute2 needed)
GATEWAY = r"""
while read -r _iface dest gw _rest; do
  [ "$dest" = 00000000 ] && echo "$((16#${gw:6:2})).$((16#${gw:4:2})).$((16#${gw:2:2})).$((16#${gw:0:2}))"
done < /proc/net/route
"""


class _Server:
    """A TCP service on the host that answers SECRET to anyone who connects."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(SECRET)
            await w.drain()
            w.close()
        self.server = await asyncio.start_server(answer, sock=self.sock)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    return [ln.split()[3].split("/")[0] for ln in out.splitlines()]


async def _probe(sb: Sandbox, port: int, addresses: list[str], user: str) -> dict[str, str]:
    gw = (await sb.exec(GATEWAY, user=user)).stdout.split()
    r = await sb.exec(["bash", "-c", PROBE, "probe", *addresses, *gw], env={"PORT": str(port)},
                      user=user, timeout=120)
    return dict(ln.split(": ", 1) for ln in r.stdout.splitlines())


@pytest.fixture
async def loopback_service() -> AsyncIterator[_Server]:
    srv = _Server("127.0.0.1")
    await srv.start()
    yield srv
    srv.close()


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_local_full_network_cannot_reach_host_loopback(
        local_backend: LocalBackend, loopback_service: _Server, user: str) -> None:
    sb = await local_backend.start(SandboxSpec(network="full"))
    try:
        got = await _probe(sb, loopback_service.port, ["127.0.0.1", *_host_addresses()], user)
    finally:
        await sb.stop()
    assert len(got) >= 3, got  # loopback, the host's addresses, the gateway
    leaked = {a: v for a, v in got.items() if SECRET.decode() in v}
    assert not leaked, f"host loopback service reached from inside: {leaked}"


@pytest.fixture
def outside_world() -> Iterator[tuple[str, int]]:
    """A stand-in for the internet: a network namespace behind a veth pair, with a TCP service.
    The host routes to it; nothing else on this machine is in it."""
    code = ("import socket,sys\ns=socket.socket();s.bind((sys.argv[1],0));s.listen()\n"
            "print(s.getsockname()[1],flush=True)\n"
            "while True:\n c,_=s.accept();c.sendall(b'hello from outside');c.close()\n")
    with outside_service(code, "amtest", 231) as (_, far_ip, port):
        yield far_ip, port


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a network namespace needs root")
async def test_local_full_network_reaches_the_outside(local_backend: LocalBackend,
                                                      outside_world: tuple[str, int]) -> None:
    ip, port = outside_world
    sb = await local_backend.start(SandboxSpec(network="full"))
    try:
        got = await _probe(sb, port, [ip], "agent")
    finally:
        await sb.stop()
    assert got[ip] == "hello from outside"


async def test_two_full_network_sandboxes_expose_the_same_port(local_backend: LocalBackend) -> None:
    """The bridge listens inside each sandbox's own namespace, not on a host port."""
    tmp = Path(tempfile.mkdtemp(prefix="amnet-"))
    servers = []
    boxes: list[Sandbox] = []
    try:
        for i in range(2):
            path = tmp / f"gw{i}.sock"

            async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter, i: int = i) -> None:
                w.write(f"gateway {i}\n".encode())
                await w.drain()
                w.close()
            servers.append(await asyncio.start_unix_server(handle, path=str(path)))
            boxes.append(await local_backend.start(SandboxSpec(
                network="full", exposed_sockets=(ExposedSocket(host_path=path, port=18931),))))
        for i, sb in enumerate(boxes):
            r = await sb.exec("exec 3<>/dev/tcp/127.0.0.1/18931 && head -1 <&3", user="agent",
                              timeout=30)
            assert r.stdout.strip() == f"gateway {i}", r.stderr
        with socket.socket() as s:  # and the host's port is free
            s.bind(("127.0.0.1", 18931))
    finally:
        for sb in boxes:
            await sb.stop()
        for srv in servers:
            srv.close()


def test_loopback_resolvers_are_forwarded(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("search example\nnameserver 127.0.0.53\nnameserver ::1\noptions edns0\n")
    text, forward = resolv_conf(conf)
    assert forward
    assert text.splitlines() == ["search example", f"nameserver {DNS_FORWARD}", "options edns0"]
    conf.write_text("nameserver 10.0.0.2\n")
    assert resolv_conf(conf) == ("nameserver 10.0.0.2\n", False)


@pytest.mark.docker
async def test_docker_full_network_cannot_reach_host_loopback(
        docker_backend: DockerBackend, loopback_service: _Server) -> None:
    sb = await docker_backend.start(SandboxSpec(network="full"))
    try:
        got = await _probe(sb, loopback_service.port, ["127.0.0.1", *_host_addresses()], "agent")
    finally:
        await sb.stop()
    assert len(got) >= 3, got
    leaked = {a: v for a, v in got.items() if SECRET.decode() in v}
    assert not leaked, f"host loopback service reached from a container: {leaked}"

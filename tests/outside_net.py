"""A stand-in for the internet: a network namespace behind a veth pair, the host routing to it,
nothing else on this machine in it, and one TCP service there (``code``, a Python program that
binds ``sys.argv[1]`` and prints its port). Shared by the network tests' fixtures."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
from collections.abc import Iterator

from agentmeter.sandbox.hosttools import ensure_tools


@contextlib.contextmanager
def outside_service(code: str, prefix: str, net: int) -> Iterator[tuple[str, str, int]]:
    """(the host's address on the pair, the service's address, its port); ``net`` picks the
    10.<net>.x.0/30 range so that fixtures of different files do not collide."""
    ensure_tools({"ip": "iproute2"}, "the network tests")  # before any sandbox installed it
    name = f"{prefix}-{secrets.token_hex(3)}"
    octet = 16 + secrets.randbelow(200)
    host_ip, far_ip = f"10.{net}.{octet}.1", f"10.{net}.{octet}.2"
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", f"{name}-h", "type", "veth", "peer", "name", f"{name}-f"],
             ["ip", "link", "set", f"{name}-f", "netns", name],
             ["ip", "addr", "add", f"{host_ip}/30", "dev", f"{name}-h"],
             ["ip", "link", "set", f"{name}-h", "up"],
             ["ip", "-n", name, "addr", "add", f"{far_ip}/30", "dev", f"{name}-f"],
             ["ip", "-n", name, "link", "set", f"{name}-f", "up"],
             ["ip", "-n", name, "link", "set", "lo", "up"]]
    server: subprocess.Popen[str] | None = None
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", code, far_ip],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        yield host_ip, far_ip, int(server.stdout.readline())
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", f"{name}-h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)

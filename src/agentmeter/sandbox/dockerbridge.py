"""The Docker daemon's bridge network: checked once the daemon answers, repaired when its host
interface was lost, else named as the reason every sandbox with network is refused.

A sandbox with network runs on the daemon's default ``bridge`` network. Two ways it can be
unusable while ``docker info`` answers: the daemon was started with ``--bridge=none`` (the
fallback of dockerd.DOCKERD_FLAG_SETS: it has no ``bridge`` network at all), or the host
interface of its bridge (docker0) was deleted under it (every container start then fails with
``could not find bridge docker0``). The second is repaired (the interface made again with its
addresses: the daemon finds its bridge by name); both are otherwise named once, as the cause.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.sandbox import dockeruserns
from agentmeter.sandbox.spec import SandboxError

#: the daemon's bridge network is unusable: why (None = usable or not known yet)
_BRIDGE_UNUSABLE: str | None = None
#: where the host's network interfaces are listed
_INTERFACES = Path("/sys/class/net")
_LOST_BRIDGE = re.compile(r"could not find bridge ([\w.-]+)|network bridge not found")


@dataclass(frozen=True)
class BridgeState:
    """The daemon's default bridge network as ``docker network inspect bridge`` shows it."""

    exists: bool  # False: the daemon has no ``bridge`` network (``--bridge=none``)
    name: str = "docker0"  # its host interface
    addresses: tuple[str, ...] = ()  # gateway/prefix of each subnet


def parse_bridge_inspect(returncode: int, stdout: str) -> BridgeState:
    """The :class:`BridgeState` of ``docker network inspect bridge --format '{{json .}}'``."""
    if returncode != 0:
        return BridgeState(exists=False)
    info = json.loads(stdout or "{}") or {}
    name = (info.get("Options") or {}).get("com.docker.network.bridge.name") or "docker0"
    addrs = []
    for cfg in (info.get("IPAM") or {}).get("Config") or []:
        gateway, subnet = cfg.get("Gateway"), cfg.get("Subnet")
        if gateway and subnet and "/" in subnet:
            addrs.append(f"{gateway}/{subnet.rpartition('/')[2]}")
    return BridgeState(exists=True, name=name, addresses=tuple(addrs))


def bridge_problem(state: BridgeState) -> str | None:
    """Why containers with network cannot start on the daemon (one sentence naming the cause),
    or None when its bridge is there."""
    if not state.exists:
        return ("the Docker daemon has no 'bridge' network (it runs with --bridge=none, "
                "agentmeter's fallback when dockerd could not set up its bridge and iptables: see "
                f"{cache_dir() / 'docker' / 'dockerd.log'}), so no sandbox with network can start "
                "on it; restart dockerd with its default bridge")
    if not (_INTERFACES / state.name).exists():
        return (f"the Docker daemon's bridge {state.name} is gone from this host (deleted while "
                f"the daemon ran: every container with network fails with 'could not find bridge "
                f"{state.name}'); restart dockerd, or make the interface again")
    return None


#: where dockerd writes its pid by default
DEFAULT_PIDFILE = Path("/var/run/docker.pid")


def _local_daemon() -> bool:
    """Whether the daemon is one whose bridge this process may check and repair: the default
    daemon or agentmeter's own, running in this process's network namespace (not a daemon
    behind a TCP host, rootless, or the host's daemon seen from inside a container)."""
    host = os.environ.get("DOCKER_HOST", "")
    own = dockeruserns.own_daemon()
    if host and host != own.host:
        return False
    try:
        pid = int((own.pidfile if host else DEFAULT_PIDFILE).read_text().strip())
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except (OSError, ValueError):
        return False


def _inspect_bridge() -> BridgeState:
    r = subprocess.run(["docker", "network", "inspect", "bridge", "--format", "{{json .}}"],
                       capture_output=True, text=True, timeout=30)
    return parse_bridge_inspect(r.returncode, r.stdout)


def _make_bridge(state: BridgeState) -> None:
    """The bridge's host interface made again, with its gateway addresses, up."""
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)
    ip("link", "add", state.name, "type", "bridge")
    for addr in state.addresses:
        ip("addr", "add", addr, "dev", state.name)
    ip("link", "set", state.name, "up")


def check_bridge() -> str | None:
    """Check the daemon's bridge: a lost interface is made again (as root, on a local daemon);
    what cannot be repaired is kept as the reason every sandbox with network is then refused
    with (:func:`bridge_refusal`) and returned."""
    global _BRIDGE_UNUSABLE
    try:
        if not _local_daemon():
            return None
        state = _inspect_bridge()
        problem = bridge_problem(state)
        if problem is not None and state.exists and os.geteuid() == 0:
            if state.name == dockeruserns.BRIDGE:  # agentmeter's own daemon: with its rules
                dockeruserns.ensure_bridge()
            else:
                _make_bridge(state)
            problem = bridge_problem(state)
    except (OSError, subprocess.TimeoutExpired, ValueError, SandboxError) as e:
        problem = f"the Docker daemon's bridge could not be checked: {e}"
    _BRIDGE_UNUSABLE = problem
    return problem


def bridge_refusal() -> str | None:
    """Why sandboxes with network cannot start on the daemon, as found by :func:`check_bridge`."""
    return _BRIDGE_UNUSABLE


async def bridge_lost(output: str) -> str | None:
    """Whether a failed ``docker`` command failed because the daemon's bridge is unusable
    (``could not find bridge docker0``, ``network bridge not found``): then the bridge is
    checked and repaired if it can be, and the return is "" when the command may be tried again,
    else the cause; None when the failure is something else."""
    if not _LOST_BRIDGE.search(output):
        return None
    problem = await asyncio.to_thread(check_bridge)
    return "" if problem is None else problem

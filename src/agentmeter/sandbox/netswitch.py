"""A sandbox's network switched between phases, as Harbor switches it: the agent phase has its
network, a verifier sharing the sandbox then has its own (``SandboxSpec.network_switch``; the
runner calls :func:`set_network` before each phase: runner/trial.py).

A switch is real isolation, not a changed environment variable: whatever an earlier phase left
running (a process of root the agent detached, a connection it holds) has only the new phase's
network afterwards.

- **The harness's proxy** (proxy.py), which a switchable sandbox has in every phase, takes the
  new phase's policy (public mode, its allowlist, or no host for "none") and ends every
  connection it carries (tunnels, relays, kept-alive clients admitted under the old policy).
- **The direct path** of a public phase: on the local backend pasta (pasta.py), which is
  stopped for a phase without public network (its tap device, routes and host-side sockets go
  with it: the namespace has only its loopback, checked) and started again, and the namespace
  fenced off the host again (netsetup.fence_host), for a public one; on the docker backend the
  container's interfaces, taken down from the host (its root has no CAP_NET_ADMIN over them)
  and brought up again with their gateway routes (``docker network connect`` cannot add them
  to a fenced namespace; the fence's rules belong to the namespace and stay).

A sandbox may not widen past the network it was started with (``spec.network``: the widest of
its phases). A backend whose sandboxes have no ``set_network`` method cannot switch:
:func:`set_network` refuses (SandboxError) rather than run a phase on another phase's network.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentmeter.sandbox.spec import NetworkPolicy, SandboxError, SandboxSpec

#: the order of networks from narrowest to widest (a sandbox may not widen past its spec's)
_WIDTH = {"none": 0, "allowlist": 1, "full": 2}


def label(network: NetworkPolicy, allowed_hosts: tuple[str, ...]) -> str:
    if network == "full":
        return "public"
    if network == "allowlist" and allowed_hosts:
        return "allowlist: " + ", ".join(allowed_hosts)
    return "no-network"


def check(spec: SandboxSpec, network: NetworkPolicy, allowed_hosts: tuple[str, ...]) -> None:
    """Refuse a switch the sandbox cannot make (SandboxError)."""
    if not spec.network_switch:
        raise SandboxError("network: this sandbox was started without a network switch "
                           "(SandboxSpec.network_switch), so its network cannot change")
    if allowed_hosts and network != "allowlist":
        raise SandboxError(f"network: allowed hosts need network 'allowlist', not {network!r}")
    if _WIDTH[network] > _WIDTH[spec.network]:
        raise SandboxError(f"network: a sandbox started with network {spec.network!r} cannot "
                           f"switch to {network!r}")


def interfaces(pid: int) -> list[str]:
    """The network interfaces of the namespace of ``pid`` (``/proc/PID/net/dev``)."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return [ln.split(":", 1)[0].strip() for ln in lines if ":" in ln]


async def only_loopback(pid: int, timeout: float = 5.0) -> None:
    """Wait until the namespace of ``pid`` has no interface but ``lo`` (a tap device goes
    once its last descriptor is closed); SandboxError if one is still there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = [i for i in await asyncio.to_thread(interfaces, pid) if i != "lo"]
        if not left:
            return
        if loop.time() > deadline:
            raise SandboxError(f"network: the sandbox still has {', '.join(left)} after its "
                               "direct network was taken away")
        await asyncio.sleep(0.01)


def _in_netns(pid: int, rootless: bool, script: str, *args: str) -> str:
    cmd = ["nsenter", "-t", str(pid)]
    if rootless:
        cmd += ["-U", "--preserve-credentials"]
    r = subprocess.run([*cmd, "-n", "sh", "-c", script, "sh", *args], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise SandboxError(f"network: {r.stderr.strip() or 'ip failed'}")
    return r.stdout


def gateway_routes(pid: int, rootless: bool) -> list[tuple[str, str]]:
    """The routes through a gateway in the namespace of ``pid`` (family, ``ip route`` line),
    kept when pasta is stopped: pasta started again cannot add them once the namespace is fenced
    (netsetup.fence_host prohibits the host's gateway, which pasta's copy of it shares, so the
    kernel finds the gateway unreachable); :func:`restore_routes` adds them ``onlink``."""
    out = _in_netns(pid, rootless, "ip -4 route show; echo --; ip -6 route show")
    v4, _, v6 = out.partition("--\n")
    return [(fam, ln.strip()) for fam, text in (("-4", v4), ("-6", v6))
            for ln in text.splitlines() if " via " in f" {ln} "]


def restore_routes(pid: int, rootless: bool, routes: list[tuple[str, str]]) -> None:
    """Add again the gateway routes :func:`gateway_routes` kept (``onlink``: the fence's rules
    stay)."""
    script = "\n".join(f"ip {fam} route replace {line} onlink" for fam, line in routes)
    if script:
        _in_netns(pid, rootless, script)


def links_down(pid: int) -> list[str]:
    """Take every interface but ``lo`` of the namespace of ``pid`` down (from the host: the
    sandbox's root has no CAP_NET_ADMIN over it), its routes with it; the names, and a check
    that none is up any more."""
    names = [i for i in interfaces(pid) if i != "lo"]
    out = _in_netns(pid, False, 'for i in "$@"; do ip link set dev "$i" down || exit 1; done; '
                    "ip -o link show up", *names)
    up = [ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ":" in ln]
    if [i for i in up if i != "lo"]:
        raise SandboxError(f"network: {', '.join(up)} still up after the sandbox's network was "
                           "taken away")
    return names


def links_up(pid: int, names: list[str]) -> None:
    _in_netns(pid, False, 'for i in "$@"; do ip link set dev "$i" up || exit 1; done', *names)


async def configured(pid: int, timeout: float = 10.0) -> None:
    """Wait until a pasta started again has configured its interface in the namespace of
    ``pid`` (an IPv4 route through a device other than ``lo``): it says it is ready before."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    route = Path(f"/proc/{pid}/net/route")
    while True:
        lines = (await asyncio.to_thread(route.read_text)).splitlines()[1:]
        if any(ln.split()[0] != "lo" for ln in lines if ln.split()):
            return
        if loop.time() > deadline:
            raise SandboxError("network: pasta did not configure the sandbox's interface again")
        await asyncio.sleep(0.01)


async def set_network(sandbox: object, network: NetworkPolicy,
                      allowed_hosts: tuple[str, ...] = ()) -> None:
    """Give ``sandbox`` the network of its next phase (its ``set_network``); a sandbox of a
    backend that cannot switch (no such method) is refused: SandboxError."""
    switch: Callable[[NetworkPolicy, tuple[str, ...]], Awaitable[None]] | None = \
        getattr(sandbox, "set_network", None)
    if switch is None:
        raise SandboxError(f"network: the {type(sandbox).__name__} backend cannot switch a "
                           "sandbox's network between phases (a task whose shared verifier "
                           "has a network of its own needs the local or docker backend)")
    await switch(network, allowed_hosts)

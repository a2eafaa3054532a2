"""What a sandbox's network adds to its spec when it starts (both backends call
:func:`start_network` in ``start``; layer builds do not).

- ``network = "allowlist"``: the harness's proxy (proxy.py) on a host Unix socket, exposed
  inside as 127.0.0.1:``PROXY_PORT``, admitting only ``allowed_hosts``; its environment
  (``http_proxy``, ``PIP_INDEX_URL``, … : proxy.sandbox_env) and, for apt,
  ``APT_CONFIG`` naming a file that sets ``Acquire::http::Proxy`` (apt as root reads the
  environment too; the file makes it explicit for tools that clear it).
- ``network = "full"`` with ``net_extras``: the same proxy in public mode, so apt's and pip's
  downloads go through the package cache (other traffic may still go direct, through pasta or
  docker's bridge).
- ``network = "none"`` with ``net_extras``: no proxy; pip, uv and apt are told not to retry
  (``PIP_RETRIES=0``, ``UV_HTTP_RETRIES=0``, ``Acquire::Retries "0"``): their lookups fail at
  once, but each retries a failed download with back-off (pip ~8 s, apt ~8 s per run), which is
  all a command that needs the network would wait for.

- ``network_switch`` (a sandbox whose network changes between phases: :func:`switch_phase`):
  the proxy whatever the network, so that every phase has it; a "none" phase's policy admits
  no host.

The task's own environment variables win over these.

A full-network sandbox is fenced off the host (:func:`fence_host`): in its network namespace
each of the host's addresses and gateways (hostaddr.fence_addresses; loopback excepted, inside
that is the sandbox's own) gets ``ip rule add to ADDR prohibit``, so a connection to a service
the host binds on 0.0.0.0 or on docker0's address fails at once, whatever carries the packet
(pasta's sockets on the host, docker's bridge). The rules are added from the host into a
namespace whose root holds no CAP_NET_ADMIN over it, so the sandbox cannot remove them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.sandbox.hostaddr import fence_addresses
from agentmeter.sandbox.hostpolicy import HostPolicy
from agentmeter.sandbox.pkgcache import PackageCache
from agentmeter.sandbox.proxy import PROXY_PORT, SandboxProxy, sandbox_env
from agentmeter.sandbox.spec import (
    ExposedSocket,
    Mount,
    NetworkPolicy,
    SandboxError,
    SandboxSpec,
)

#: where the apt configuration file appears inside a sandbox (named by APT_CONFIG)
APT_CONF_TARGET = "/etc/agentmeter-apt.conf"
_NO_RETRIES = {"PIP_RETRIES": "0", "UV_HTTP_RETRIES": "0"}


@dataclass
class SandboxNetwork:
    """The running parts of a sandbox's network (the proxy, if any); ``stop`` ends them."""

    proxy: SandboxProxy | None = None
    _blocked: dict[str, str] = field(default_factory=dict)

    def blocked(self) -> dict[str, str]:
        """The hosts its proxy refused or could not reach ("host:port" -> why; proxy.py), kept
        after ``stop``."""
        return dict(self.proxy.blocked) if self.proxy is not None else dict(self._blocked)

    def switch(self, spec: SandboxSpec, network: NetworkPolicy,
               allowed_hosts: tuple[str, ...]) -> None:
        """Give the proxy another phase's policy (``network``: "full" is public mode, "none" an
        allowlist of no host), ending every connection it carries (proxy.py ``set_policy``).
        Only a sandbox started with ``spec.network_switch`` has a proxy whatever its phase."""
        if self.proxy is None:
            raise SandboxError("network: this sandbox was started without a network switch "
                               "(SandboxSpec.network_switch), so its network cannot change")
        self.proxy.set_policy(_policy(spec, network, allowed_hosts))

    async def stop(self) -> None:
        if self.proxy is not None:
            self._blocked = dict(self.proxy.blocked)
            await self.proxy.stop()
            self.proxy = None


def _apt_conf(text: str) -> Path:
    """A host file holding ``text`` (named by its digest: written once, atomically)."""
    path = cache_dir() / "network" / f"apt-{hashlib.sha256(text.encode()).hexdigest()[:16]}.conf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


def label(spec: SandboxSpec) -> str:
    """The sandbox's network as a trial states it: no-network, public, allowlist: a, b."""
    if spec.network == "full":
        return "public"
    if spec.network == "allowlist" and spec.allowed_hosts:
        return "allowlist: " + ", ".join(spec.allowed_hosts)
    return "no-network"


async def start_network(spec: SandboxSpec) -> tuple[SandboxSpec, SandboxNetwork]:
    """Start what ``spec``'s network needs; the spec with the sockets, mounts and environment
    it adds (the caller starts the sandbox from that one)."""
    uses_proxy = (spec.network == "allowlist" or (spec.network == "full" and spec.net_extras)
                  or spec.network_switch)
    if not uses_proxy:
        if spec.network == "none" and spec.net_extras:
            conf = _apt_conf('Acquire::Retries "0";\n')
            return _extended(spec, {**_NO_RETRIES, "APT_CONFIG": APT_CONF_TARGET}, (), conf), \
                SandboxNetwork()
        return spec, SandboxNetwork()
    proxy = SandboxProxy(_policy(spec, spec.network, spec.allowed_hosts), cache=PackageCache())
    await proxy.start()
    try:
        env = sandbox_env(PROXY_PORT)
        conf = _apt_conf(f'Acquire::http::Proxy "{env["http_proxy"]}";\n'
                         f'Acquire::https::Proxy "{env["https_proxy"]}";\n')
        sock = ExposedSocket(host_path=proxy.socket_path, port=PROXY_PORT)
        return (_extended(spec, {**env, "APT_CONFIG": APT_CONF_TARGET}, (sock,), conf),
                SandboxNetwork(proxy))
    except BaseException:
        with contextlib.suppress(Exception):
            await proxy.stop()
        raise


def _policy(spec: SandboxSpec, network: NetworkPolicy, hosts: tuple[str, ...]) -> HostPolicy:
    """The proxy's policy for a network: "full" public mode, "allowlist" its hosts, "none" no
    host at all."""
    if network == "full":
        return HostPolicy(None)
    return HostPolicy(hosts if network == "allowlist" else (),
                      host_network=spec.allow_host_network and network == "allowlist")


def _extended(spec: SandboxSpec, env: dict[str, str], sockets: tuple[ExposedSocket, ...],
              apt_conf: Path) -> SandboxSpec:
    mounts = spec.mounts
    if not any(m.target == APT_CONF_TARGET for m in mounts):
        mounts = (*mounts, Mount(source=apt_conf, target=APT_CONF_TARGET, read_only=True))
    return spec.model_copy(update={
        "env": {**env, **spec.env}, "mounts": mounts,
        "exposed_sockets": (*spec.exposed_sockets, *sockets)})


#: run inside the namespace: IPv4 rules from $0, IPv6 ones from $1 (``ip -batch`` takes no
#: per-line family)
_FENCE = 'printf %s "$0" | ip -4 -batch - && { [ -z "$1" ] || printf %s "$1" | ip -6 -batch -; }'


def fence_host(pid: int, *, enter_userns: bool = False) -> list[str]:
    """Add a ``prohibit`` rule for each host address and gateway in the network namespace of
    ``pid`` (``enter_userns``: the namespace belongs to that process's user namespace, as a
    rootless local sandbox's does); the addresses fenced. Raises SandboxError when ``ip``
    fails: a full-network sandbox does not start unfenced."""
    addresses = fence_addresses()
    lines = {4: "", 6: ""}
    for a in addresses:
        lines[a.version] += f"rule add to {a} prohibit\n"
    cmd = ["nsenter", "-t", str(pid)]
    if enter_userns:
        cmd += ["-U", "--preserve-credentials"]
    cmd += ["-n", "sh", "-c", _FENCE, lines[4], lines[6]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise SandboxError(f"network: cannot fence the host's addresses off the sandbox "
                           f"({', '.join(map(str, addresses))}): {r.stderr.strip()}")
    return [str(a) for a in addresses]

"""agentmeter's own Docker daemon with user-namespace remapping (``dockerd --userns-remap``).

Without remapping, a container's root is host uid 0 (with Docker's default capabilities,
seccomp and no-new-privileges): a Harbor task whose image has no ``USER`` runs its agent as
host root inside the container. With :data:`POLICY_ENV` ``=remap``, when no daemon answers,
agentmeter starts its *own* daemon with ``--userns-remap`` on its own socket, exec-root, pidfile
and data-root (a user's own Docker is untouched); containers' ids 0..65535 are then the host ids
``start..start+65535`` of the subordinate range of :data:`REMAP_USER` in ``/etc/subuid`` and
``/etc/subgid``, which :func:`ensure_subids` adds once (under a lock, never rewriting a line
it did not write). When a daemon without remapping answers, :func:`check_daemon` says so once.

The data-root lives under agentmeter's cache when the remapped root can traverse every directory
above it (dockerd refuses otherwise; a home directory is usually 0700), else under
:data:`SYSTEM_DATA_ROOT`. A new data-root is cold: the Debian base is imported and every layer
built once more (docs/security.md gives the measured time).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.paths import cache_dir
from agentmeter.sandbox.hosttools import DOCKER_USERNS_TOOLS, ensure_tools
from agentmeter.sandbox.idmap import SHIFT_BASE, SHIFT_SIZE
from agentmeter.sandbox.spec import SandboxError

#: ``remap`` (agentmeter starts its own remapped daemon when none answers) or ``off``
POLICY_ENV = "AGENTMETER_DOCKER_USERNS"
POLICIES = ("remap", "off")
DEFAULT_POLICY = "off"
#: the system account whose subordinate ranges the daemon maps containers onto
REMAP_USER = "agentmeter-docker"
#: ids 0..REMAP_SIZE-1 of a container are mapped
REMAP_SIZE = 65536
#: the lowest first id agentmeter picks: above the local backend's range (idmap.py) and the
#: usual 100000+ ranges useradd hands out
REMAP_FLOOR = SHIFT_BASE + (1 << 24)
#: exec-root (sockets, pidfile, containerd state): short, unix socket paths have 108 bytes
EXEC_ROOT = Path("/run/agentmeter-dockerd")
SYSTEM_DATA_ROOT = Path("/var/lib/agentmeter/dockerd-userns")
#: one past the highest id a range may use ((uid_t)-1 is "no id")
MAX_ID = (1 << 32) - 1
#: the own daemon's bridge (beside another daemon's docker0, whose iptables chains it leaves
#: alone: its NAT and forwarding rules are agentmeter's, see :func:`ensure_bridge`)
BRIDGE = "agentmeter-d0"
#: the bridge's subnet: the first of these that no route or address of the host overlaps
BRIDGE_SUBNETS = ("172.29.254.0/24", "172.30.254.0/24", "10.213.254.0/24", "192.168.213.0/24")
SUBUID = Path("/etc/subuid")
SUBGID = Path("/etc/subgid")


def policy() -> str:
    value = os.environ.get(POLICY_ENV, DEFAULT_POLICY).strip().lower() or DEFAULT_POLICY
    if value not in POLICIES:
        raise SandboxError(f"{POLICY_ENV}={value!r}: expected one of {', '.join(POLICIES)}")
    return value


@dataclass(frozen=True)
class SubIds:
    start: int
    count: int


def _ranges(text: str) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def pick_start(taken: list[tuple[int, int]], used_ids: set[int], floor: int = REMAP_FLOOR,
               size: int = REMAP_SIZE) -> int:
    """The lowest ``start >= floor`` (a multiple of ``size``) whose ``size`` ids overlap no
    range in ``taken`` (start, count), the local backend's range, nor an id in ``used_ids``."""
    busy = [*taken, (SHIFT_BASE, SHIFT_SIZE)]
    start = floor
    while start + size <= MAX_ID:
        end = start + size
        clash = [s + c for s, c in busy if s < end and start < s + c]
        if not clash and not any(start <= i < end for i in used_ids):
            return start
        start = max([start + size, *clash])
        start = -(-start // size) * size
    raise SandboxError("no free subordinate id range for the remapped Docker daemon")


def _account_ids() -> set[int]:
    ids: set[int] = set()
    for p in pwd.getpwall():
        ids.update((p.pw_uid, p.pw_gid))
    return ids


def _ensure_account() -> None:
    """The system account dockerd needs by name (it looks the remap user up in passwd)."""
    try:
        pwd.getpwnam(REMAP_USER)
        return
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", REMAP_USER],
                       capture_output=True, text=True)
    if r.returncode != 0 and r.returncode != 9:  # 9: the name exists (a concurrent caller)
        raise SandboxError(f"useradd {REMAP_USER} failed: {r.stderr.strip()}")


def ensure_subids(subuid: Path = SUBUID, subgid: Path = SUBGID,
                  lock_dir: Path | None = None) -> SubIds:
    """The subordinate range of :data:`REMAP_USER`: the one both files already give it (the
    same start in both), else a new free one appended to both. Idempotent; lines of other
    users are never changed; concurrent callers serialise on a lock file."""
    lock_path = (lock_dir or cache_dir() / "docker") / "subids.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        texts = [f.read_text() if f.exists() else "" for f in (subuid, subgid)]
        mine = [[(s, c) for n, s, c in _ranges(t) if n == REMAP_USER] for t in texts]
        if mine[0] and mine[1] and mine[0][0] == mine[1][0] and mine[0][0][1] >= REMAP_SIZE:
            return SubIds(*mine[0][0])
        if mine[0] or mine[1]:
            raise SandboxError(
                f"{subuid} and {subgid} give {REMAP_USER} different or short ranges "
                f"({mine[0]} / {mine[1]}); make them one range of at least {REMAP_SIZE} ids")
        taken = [(s, c) for t in texts for _, s, c in _ranges(t)]
        start = pick_start(taken, _account_ids())
        for f, text in zip((subuid, subgid), texts, strict=True):
            sep = "" if not text or text.endswith("\n") else "\n"
            with open(f, "a") as fh:
                fh.write(f"{sep}{REMAP_USER}:{start}:{REMAP_SIZE}\n")
            os.chmod(f, 0o644)
        return SubIds(start, REMAP_SIZE)


def _traversable(path: Path) -> bool:
    """Every existing directory above ``path`` lets others search it (o+x)."""
    for d in path.parents:
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
        except FileNotFoundError:
            continue
    return True


@dataclass(frozen=True)
class OwnDaemon:
    """Where agentmeter's own remapped daemon keeps its socket, state and images."""

    exec_root: Path
    data_root: Path

    @property
    def socket(self) -> Path:
        return self.exec_root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pidfile(self) -> Path:
        return self.exec_root / "dockerd.pid"

    def flags(self) -> tuple[str, ...]:
        return (f"--userns-remap={REMAP_USER}:{REMAP_USER}", f"--host={self.host}",
                f"--exec-root={self.exec_root}", f"--data-root={self.data_root}",
                f"--pidfile={self.pidfile}",
                # beside another daemon: neither its docker0 nor its iptables chains
                "--iptables=false", f"--bridge={BRIDGE}")


def own_daemon() -> OwnDaemon:
    preferred = cache_dir() / "docker" / "userns-root"
    data_root = preferred if _traversable(preferred) else SYSTEM_DATA_ROOT
    return OwnDaemon(exec_root=EXEC_ROOT, data_root=data_root)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SandboxError(f"ip {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def pick_subnet(used: list[str], candidates: tuple[str, ...] = BRIDGE_SUBNETS) -> str:
    """The first candidate that overlaps none of the ``used`` networks."""
    nets = [ipaddress.ip_network(u, strict=False) for u in used]
    for c in candidates:
        net = ipaddress.ip_network(c)
        if not any(net.overlaps(n) for n in nets if n.version == 4 and n.prefixlen > 0):
            return c
    raise SandboxError(f"no free subnet for the {BRIDGE} bridge (tried {', '.join(candidates)})")


def _iptables_rule(table: str, chain: str, rule: list[str]) -> None:
    """Insert ``rule`` at the top of ``chain`` unless it is there (idempotent)."""
    if subprocess.run(["iptables", "-w", "-t", table, "-C", chain, *rule],
                      capture_output=True).returncode == 0:
        return
    r = subprocess.run(["iptables", "-w", "-t", table, "-I", chain, *rule],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SandboxError(f"iptables -t {table} -I {chain} {' '.join(rule)}: {r.stderr.strip()}")


def ensure_bridge() -> str:
    """The own daemon's bridge, made once (its subnet kept while it exists), with NAT to the
    outside and forwarding in and out (not between its containers); returns its subnet. The
    rules are agentmeter's own, so another daemon's chains are never touched."""
    shown = _ip("-j", "-4", "addr", "show", "dev", BRIDGE, check=False)
    addrs = [a for link in (json.loads(shown.stdout or "[]") if shown.returncode == 0 else [])
             for a in link.get("addr_info", [])]
    if addrs:
        subnet = str(ipaddress.ip_network(f"{addrs[0]['local']}/{addrs[0]['prefixlen']}",
                                          strict=False))
    else:
        routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
        subnet = pick_subnet([r["dst"] for r in routes if r.get("dst", "default") != "default"
                              and r.get("dev") != BRIDGE])
        if shown.returncode != 0:
            _ip("link", "add", BRIDGE, "type", "bridge")
        gateway = next(ipaddress.ip_network(subnet).hosts())
        _ip("addr", "add", f"{gateway}/{ipaddress.ip_network(subnet).prefixlen}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    _iptables_rule("nat", "POSTROUTING", ["-s", subnet, "!", "-o", BRIDGE, "-j", "MASQUERADE"])
    _iptables_rule("filter", "FORWARD", ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "ACCEPT"])
    _iptables_rule("filter", "FORWARD", ["-o", BRIDGE, "-m", "conntrack", "--ctstate",
                                         "RELATED,ESTABLISHED", "-j", "ACCEPT"])
    forward = Path("/proc/sys/net/ipv4/ip_forward")
    if forward.read_text().strip() != "1":
        forward.write_text("1")  # as dockerd itself does for its bridge
    return subnet


def prepare(own: OwnDaemon) -> SubIds:
    """What dockerd needs before it starts with ``--userns-remap``: the tools, the account,
    its subordinate ranges, the bridge, and the directories (searchable, so the remapped root
    can reach its own subdirectory of the data-root)."""
    ensure_tools(DOCKER_USERNS_TOOLS, "agentmeter's own Docker daemon (user-namespace remap)")
    _ensure_account()
    ids = ensure_subids()
    ensure_bridge()
    for d in (own.exec_root, own.data_root):
        d.mkdir(parents=True, exist_ok=True, mode=0o711)
    return ids


def remapped(timeout: float = 10) -> bool | None:
    """Whether the daemon that answers runs containers in a remapped user namespace (None: no
    answer)."""
    try:
        r = subprocess.run(["docker", "info", "--format", "{{json .SecurityOptions}}"],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return "name=userns" in r.stdout


def map_id(uid_map: str, inner: int) -> int:
    """``inner`` mapped through a ``/proc/PID/uid_map`` text (unmapped: itself)."""
    for line in uid_map.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            inside, outside, count = map(int, parts)
            if inside <= inner < inside + count:
                return outside + inner - inside
    return inner


def host_uid(pid: int, uid: int) -> int:
    """The host uid of ``uid`` in the user namespace of process ``pid`` (a container's init):
    shifted under a remapped daemon, the same id otherwise or when the map cannot be read
    (not root, or the daemon is not on this host)."""
    try:
        with open(f"/proc/{pid}/uid_map") as f:
            return map_id(f.read(), uid)
    except OSError:
        return uid


def check_daemon() -> None:
    """Say once when the daemon in use maps a container's root to host root."""
    if remapped() is False:
        notice("docker: this Docker daemon runs without user-namespace remapping: a task's "
               "root agent is host uid 0 inside its container (seccomp, no-new-privileges and "
               "Docker's default capabilities only); see docs/security.md. With no daemon "
               f"running, {POLICY_ENV}=remap makes agentmeter start its own remapped one")

"""Internet for a local sandbox with ``network = "full"``, without the host's network namespace.

Every local sandbox has its own network namespace (the keeper's). For a full-network sandbox,
pasta (Debian package ``passt``) attaches to it: it creates a tap device inside, copies the
host's addresses and routes onto it, and carries each connection out through an ordinary socket
of the host. Options that matter:

- ``--no-map-gw``: by default pasta maps connections to the gateway address onto the host's
  loopback, which would hand the agent every service listening on the host's 127.0.0.1;
- ``-t none -u none``: no host port is forwarded into the sandbox;
- ``-T none -U none``: no port of the sandbox's loopback leads to the host's loopback.

The sandbox's own 127.0.0.1 is its own: the gateway bridge (bridge.py) listens there, exactly as
without network, so two sandboxes never compete for a host port. DNS: the sandbox gets the host's
resolvers; loopback ones (systemd-resolved's 127.0.0.53) are replaced by ``DNS_FORWARD``, which
pasta maps to the host's first resolver (UDP port 53 only).

pasta runs as a child of a small shell that exits, killing pasta, when its stdin closes (stop,
or the owner died), like the keeper. As root it keeps uid 0 (``--runas 0``: as nobody it may not
enter a root-owned namespace) but drops to two capabilities, a seccomp filter and its own
namespaces, as it does for every user.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
from pathlib import Path

from agentmeter.sandbox.spec import SandboxError

#: what a sandbox's resolv.conf names instead of a loopback resolver (pasta forwards it)
DNS_FORWARD = "169.254.1.53"

_WRAPPER = r"""
pasta -f -q $AM_RUNAS --config-net --no-map-gw -t none -u none -T none -U none \
  $AM_DNS --netns "/proc/self/fd/$AM_NETNS_FD" $AM_USERNS -P "$AM_DIR/pasta.pid" \
  </dev/null >"$AM_DIR/pasta.log" 2>&1 &
i=0
until [ -s "$AM_DIR/pasta.pid" ]; do
  if grep -qs '^State:.*Z' "/proc/$!/status" || [ ! -e "/proc/$!" ] || [ $i -ge 2000 ]; then
    cat "$AM_DIR/pasta.log" >&2; kill $! 2>/dev/null; exit 1
  fi
  i=$((i+1)); sleep 0.005
done
echo ready
cat >/dev/null
kill "$(cat "$AM_DIR/pasta.pid")" 2>/dev/null
wait
"""


def resolv_conf(host: Path = Path("/etc/resolv.conf")) -> tuple[str, bool]:
    """The host's resolv.conf with loopback nameservers replaced by ``DNS_FORWARD``, and
    whether there were any (then pasta is told to forward that address)."""
    try:
        text = host.read_text()
    except OSError:
        text = ""
    out, forwarded = [], False
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            with contextlib.suppress(ValueError):
                if ipaddress.ip_address(parts[1].split("%")[0]).is_loopback:
                    if not forwarded:
                        out.append(f"nameserver {DNS_FORWARD}")
                    forwarded = True
                    continue
        out.append(line)
    return "\n".join(out) + "\n", forwarded


class Pasta:
    """The running pasta of one sandbox; ``stop`` ends it."""

    def __init__(self, proc: subprocess.Popen[bytes], directory: Path) -> None:
        self.proc = proc
        self.dir = directory

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def start_pasta(keeper_pid: int, directory: Path, rootless: bool) -> Pasta:
    """Attach pasta to the network namespace of ``keeper_pid`` and wait until it is configured.
    Writes ``directory/resolv.conf`` for the sandbox."""
    conf, forward = resolv_conf()
    (directory / "resolv.conf").write_text(conf)
    fds = [os.open(f"/proc/{keeper_pid}/ns/net", os.O_RDONLY)]
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "AM_DIR": str(directory), "AM_DNS": f"--dns-forward {DNS_FORWARD}" if forward else "",
           "AM_NETNS_FD": str(fds[0]),
           "AM_RUNAS": "" if rootless else "--runas 0:0", "AM_USERNS": ""}
    try:
        if rootless:  # the namespace belongs to the keeper's user namespace: pasta joins it
            fds.append(os.open(f"/proc/{keeper_pid}/ns/user", os.O_RDONLY))
            env["AM_USERNS"] = f"--userns /proc/self/fd/{fds[1]}"
        proc = subprocess.Popen(["sh", "-c", _WRAPPER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                pass_fds=fds, start_new_session=True)
    finally:
        for fd in fds:
            os.close(fd)
    assert proc.stdout is not None and proc.stderr is not None
    if proc.stdout.readline().strip() != b"ready":
        err = proc.stderr.read().decode(errors="replace").strip()
        Pasta(proc, directory).stop()
        hint = " (as an ordinary user pasta needs read-write /dev/net/tun)" if rootless else ""
        raise SandboxError(f"network: pasta failed to attach to the sandbox{hint}: "
                           f"{err or 'no output'}")
    return Pasta(proc, directory)

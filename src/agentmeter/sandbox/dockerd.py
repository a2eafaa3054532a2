"""The Docker daemon: find one that answers, or start ``dockerd`` (root only), agentmeter's own
remapped daemon included (dockeruserns.py); its bridge is checked once it answers
(dockerbridge.py).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.paths import cache_dir
from agentmeter.sandbox import dockeruserns
from agentmeter.sandbox.dockerbridge import check_bridge
from agentmeter.sandbox.hosttools import DOCKER_TOOLS, ensure_tools
from agentmeter.sandbox.spec import SandboxError


def daemon_answers(timeout: float = 10, host: str | None = None) -> bool:
    """Whether ``docker info`` answers (on ``host``, else the CLI's own choice)."""
    env = dict(os.environ, DOCKER_HOST=host) if host else None
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


@dataclass
class DockerDaemon:
    """A daemon that answers; ``stop`` ends it only if this process started it."""

    started: bool
    log_path: Path | None = None
    flags: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: its ``DOCKER_HOST`` when it is agentmeter's own remapped daemon (dockeruserns.py)
    host: str | None = None

    def stop(self, timeout: float = 20) -> None:
        if not self.started or self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: dockerd flag sets tried in order: the defaults first, then without host networking setup
DOCKERD_FLAG_SETS: tuple[tuple[str, ...], ...] = ((), ("--iptables=false", "--bridge=none"))


def ensure_dockerd(wait_s: float = 60) -> DockerDaemon:
    """Return a daemon that answers ``docker info``, starting ``dockerd`` (root only) if needed.

    With ``AGENTMETER_DOCKER_USERNS=remap`` (dockeruserns.py) and no ``DOCKER_HOST`` of the
    user's: agentmeter's own remapped daemon when it answers, else the daemon that answers (a
    notice when it does not remap), else agentmeter's own remapped daemon, started; using it
    sets ``DOCKER_HOST`` in this process's environment (every ``docker`` call inherits it)."""
    mode = dockeruserns.policy()
    own = dockeruserns.own_daemon() if mode == "remap" and "DOCKER_HOST" not in os.environ \
        else None
    if own is not None and own.socket.exists() and daemon_answers(host=own.host):
        os.environ["DOCKER_HOST"] = own.host
        return _bridge_checked(DockerDaemon(started=False, host=own.host))
    if daemon_answers():
        dockeruserns.check_daemon()
        return _bridge_checked(DockerDaemon(started=False))
    if os.geteuid() != 0:
        raise SandboxError("no Docker daemon answers and starting dockerd needs root "
                           "(start it with: sudo dockerd &)")
    ensure_tools(DOCKER_TOOLS, "the docker sandbox backend")
    if own is not None:
        return _bridge_checked(start_own_daemon(own, wait_s))
    daemon = _start_dockerd(DOCKERD_FLAG_SETS, cache_dir() / "docker" / "dockerd.log", wait_s)
    dockeruserns.check_daemon()
    return _bridge_checked(daemon)


def _bridge_checked(daemon: DockerDaemon) -> DockerDaemon:
    """``daemon``, its bridge checked (repaired if lost): a bridge that cannot be used is said
    once here, and is the reason every sandbox with network is refused with."""
    problem = check_bridge()
    if problem is not None:
        notice(f"docker: {problem}")
    return daemon


def start_own_daemon(own: dockeruserns.OwnDaemon, wait_s: float = 60) -> DockerDaemon:
    """Start agentmeter's own remapped daemon (its subordinate ids added first) and point this
    process's ``docker`` calls at it (``DOCKER_HOST``)."""
    lock_path = cache_dir() / "docker" / "dockerd-userns.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter; the others find it answering
        if own.socket.exists() and daemon_answers(host=own.host):
            daemon = DockerDaemon(started=False, host=own.host)
        else:
            dockeruserns.prepare(own)
            daemon = _start_dockerd((own.flags(),), cache_dir() / "docker" / "dockerd-userns.log",
                                    wait_s, host=own.host)
            daemon.host = own.host
    os.environ["DOCKER_HOST"] = own.host
    return daemon


def _start_dockerd(flag_sets: tuple[tuple[str, ...], ...], log_path: Path, wait_s: float,
                   host: str | None = None) -> DockerDaemon:
    """``dockerd FLAGS`` for the first flag set whose daemon answers (on ``host``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for flags in flag_sets:
        with open(log_path, "ab") as log:
            log.write(f"\n--- agentmeter: dockerd {' '.join(flags)} at {time.ctime()}\n".encode())
            log.flush()
            proc = subprocess.Popen(["dockerd", *flags], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and proc.poll() is None:
            if daemon_answers(timeout=5, host=host):
                return DockerDaemon(started=True, log_path=log_path, flags=flags, proc=proc)
            time.sleep(0.3)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
        tail = log_path.read_text(errors="replace").splitlines()[-8:]
        failures.append(f"dockerd {' '.join(flags)}:\n  " + "\n  ".join(tail))
    raise SandboxError(f"could not start dockerd (log: {log_path})\n" + "\n".join(failures))

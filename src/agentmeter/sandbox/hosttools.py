"""Host programs the sandboxes need, installed on first need where that is possible.

Every apt install agentmeter makes on the host goes through :func:`ensure_tools`: concurrent
trials (threads) and concurrent agentmeter processes (a run and its verifiers, parallel test
sessions) take one lock (a thread lock, then an ``flock`` on :data:`LOCK_PATH`), look again at
what is missing once they hold it (the one that waited finds the tools installed and installs
nothing), and apt itself waits a bounded time for a dpkg lock someone else holds (an unattended
upgrade). A failed install says apt's exit status and its last lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from agentmeter.sandbox.spec import SandboxError

#: command -> Debian package that provides it
LOCAL_TOOLS = {"bwrap": "bubblewrap", "unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2",
               "pasta": "passt"}  # pasta: network = "full" (pasta.py)
#: each exec joins its own session keyring (see local.py)
KEYRING_TOOLS = {"keyctl": "keyutils"}
DEBIAN_BASE_TOOLS = {"debootstrap": "debootstrap"}
DOCKER_TOOLS = {"dockerd": "docker.io", "docker": "docker.io"}
#: OCI images as local base images (oci.py)
OCI_TOOLS = {"skopeo": "skopeo", "umoci": "umoci"}

#: held (flock) by whoever installs; shared by every agentmeter process on the host
LOCK_PATH = Path("/run/lock/agentmeter-apt.lock")
#: seconds apt waits for a dpkg lock another program holds before it gives up
DPKG_LOCK_TIMEOUT_S = 300
#: lines of apt's output a failure quotes
FAILURE_TAIL_LINES = 15

_thread_lock = threading.Lock()

Finder = Callable[[str], str | None]


def missing(tools: dict[str, str], find: Finder = shutil.which) -> dict[str, str]:
    return {cmd: pkg for cmd, pkg in tools.items() if find(cmd) is None}


def can_install() -> bool:
    """Whether this process may install Debian packages (root, with apt-get)."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


@contextlib.contextmanager
def install_lock() -> Iterator[None]:
    """The host-wide installer lock: one install at a time, across threads and processes."""
    with _thread_lock:
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock


def _apt(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", f"-oDPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_S}", *args],
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _install(pkgs: list[str], why: str) -> None:
    """``apt-get update`` then ``apt-get install`` (the caller holds the lock); raises naming
    the exit status and the last lines of apt's output."""
    _apt(["update", "-qq"])  # a failed update (offline mirror) shows in the install's error
    r = _apt(["install", "-y", "-qq", *pkgs])
    if r.returncode != 0:
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        tail = "\n".join(lines[-FAILURE_TAIL_LINES:])
        raise SandboxError(f"installing {' '.join(pkgs)} (needed for {why}) failed: apt-get install "
                           f"exited with status {r.returncode}:\n{tail}")


def ensure_tools(tools: dict[str, str], why: str, log: object = print, *,
                 find: Finder = shutil.which) -> None:
    """Install the Debian packages of the missing ``tools`` (command -> package) when running
    as root with apt-get, one installer at a time on the host; otherwise raise with the command
    the user should run. ``find`` locates a command (default: on PATH)."""
    need = missing(tools, find)
    if not need:
        return
    if can_install():
        with install_lock():
            # another thread or process may have installed them while we waited
            need = missing(tools, find)
            if not need:
                return
            pkgs = sorted(set(need.values()))
            if callable(log):
                log(f"agentmeter: installing {' '.join(pkgs)} (needed for {why})")
            _install(pkgs, why)
        need = missing(tools, find)
        if not need:
            return
    raise SandboxError(
        f"{', '.join(sorted(need))} not found (needed for {why}); "
        f"install with: sudo apt-get install {' '.join(sorted(set(need.values())))}"
    )

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
import functools
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from agentmeter.sandbox.spec import SandboxError

#: command -> Debian package that provides it
LOCAL_TOOLS = {"bwrap": "bubblewrap", "unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2",
               "pasta": "passt"}  # pasta: network = "full" (pasta.py)
#: each exec joins its own session keyring (see local.py)
KEYRING_TOOLS = {"keyctl": "keyutils"}
DEBIAN_BASE_TOOLS = {"debootstrap": "debootstrap"}
DOCKER_TOOLS = {"dockerd": "docker.io", "docker": "docker.io"}
#: agentmeter's own remapped dockerd: its bridge and NAT (dockeruserns.py), its remap account
DOCKER_USERNS_TOOLS = {"ip": "iproute2", "iptables": "iptables", "useradd": "passwd"}
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


#: every copy out of a sandbox runs the host's static busybox inside it (copyout.py)
BUSYBOX_TOOLS = {"busybox": "busybox-static"}
_PT_INTERP = 3


def elf_interpreter(path: str) -> bytes | None:
    """The program interpreter (PT_INTERP) an ELF executable asks for, None when it has none
    (a static binary); SandboxError when ``path`` is not an ELF executable."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            raise SandboxError(f"{path} is not an ELF executable")
        wide = head[4] == 2
        order: Literal["little", "big"] = "little" if head[5] == 1 else "big"

        def num(off: int, size: int) -> int:
            return int.from_bytes(head[off:off + size], order)

        phoff = num(32, 8) if wide else num(28, 4)
        phentsize, phnum = (num(54, 2), num(56, 2)) if wide else (num(42, 2), num(44, 2))
        if phnum > 4096 or phentsize < (56 if wide else 32):
            raise SandboxError(f"{path}: implausible ELF program header table")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            ent = table[i * phentsize:(i + 1) * phentsize]
            if len(ent) < phentsize:
                raise SandboxError(f"{path}: truncated ELF program header table")
            if int.from_bytes(ent[:4], order) == _PT_INTERP:
                off = int.from_bytes(ent[8:16] if wide else ent[4:8], order)
                size = int.from_bytes(ent[32:40] if wide else ent[16:20], order)
                f.seek(off)
                return f.read(min(size, 4096)).rstrip(b"\0")
    return None


@functools.cache
def static_busybox(log: object = print) -> str:
    """The absolute, resolved path of the host's static busybox (package busybox-static,
    installed on first need). A dynamically linked one (it would need the sandbox's loader and
    libraries) or one writable by others is refused."""
    ensure_tools(BUSYBOX_TOOLS, "copying files out of sandboxes", log)
    found = shutil.which("busybox")
    assert found is not None  # ensure_tools raised otherwise
    path = os.path.realpath(found)
    interp = elf_interpreter(path)
    if interp is not None:
        raise SandboxError(
            f"{path} is dynamically linked (it asks for {interp.decode(errors='replace')}); "
            "copies out of sandboxes need a static busybox: install busybox-static")
    st = os.stat(path)
    if st.st_mode & 0o022 or st.st_uid not in (0, os.geteuid()):
        raise SandboxError(f"{path} is writable by others or owned by another user: refused")
    return path

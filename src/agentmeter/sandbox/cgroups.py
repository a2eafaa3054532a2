"""Memory, process-count and CPU limits through cgroups: v2 where its controllers are available,
else v1 (these machines are hybrid v1). Where cgroups are not writable (a non-root user without
delegation) the limits are skipped with a warning, never silently."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.sandbox.spec import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_NAME = "agentmeter"


def _v2_root() -> Path | None:
    ctl = CGROUP_ROOT / "cgroup.controllers"
    if ctl.exists() and {"memory", "pids"} <= set(ctl.read_text().split()):
        return CGROUP_ROOT
    return None


class Cgroup:
    """The cgroup(s) of one sandbox. ``procs_files`` are written with a pid to move it in."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        return out

    def kill_all(self) -> None:
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)

    def oom_killed(self) -> bool:
        """True when the memory limit killed something in this group."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                f = d / name
                if f.exists():
                    for line in f.read_text().splitlines():
                        key, _, val = line.partition(" ")
                        if key == "oom_kill" and int(val or 0) > 0:
                            return True
        return False


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def group_name(sandbox_id: str, owner_pid: int) -> str:
    """Groups carry their owner's pid: stale ones are found whatever cache dir made them."""
    return f"{owner_pid}-{sandbox_id}"


def create(sandbox_id: str, limits: Limits) -> Cgroup | None:
    """Create the sandbox's cgroup(s) with ``limits``; None when no limit needs one."""
    if limits.memory_mb is None and limits.pids is None and limits.cpus is None:
        return None
    try:
        return _create(group_name(sandbox_id, os.getpid()), limits)
    except OSError as e:
        notice(f"resource limits (memory/pids/cpus) not applied: cgroups are "
               f"not writable here ({e.strerror}); run as root or delegate a cgroup")
        return None


def _create(sandbox_id: str, limits: Limits) -> Cgroup:
    v2 = _v2_root()
    if v2 is not None:
        parent = v2 / GROUP_NAME
        parent.mkdir(exist_ok=True)
        try:
            _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
        except OSError:
            _write(parent / "cgroup.subtree_control", "+memory +pids")
        d = parent / sandbox_id
        d.mkdir()
        if limits.memory_mb:
            _write(d / "memory.max", str(limits.memory_mb * 1024 * 1024))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if limits.pids:
            _write(d / "pids.max", str(limits.pids))
        if limits.cpus and (d / "cpu.max").exists():
            _write(d / "cpu.max", f"{int(limits.cpus * 100_000)} 100000")
        return Cgroup([d])
    dirs: list[Path] = []
    try:
        if limits.memory_mb:
            d = CGROUP_ROOT / "memory" / GROUP_NAME / sandbox_id
            d.mkdir(parents=True)
            dirs.append(d)
            limit = str(limits.memory_mb * 1024 * 1024)
            _write(d / "memory.limit_in_bytes", limit)
            if (d / "memory.memsw.limit_in_bytes").exists():
                _write(d / "memory.memsw.limit_in_bytes", limit)  # no swapping past the limit
        if limits.pids:
            d = CGROUP_ROOT / "pids" / GROUP_NAME / sandbox_id
            d.mkdir(parents=True)
            dirs.append(d)
            _write(d / "pids.max", str(limits.pids))
        if limits.cpus:
            d = CGROUP_ROOT / "cpu" / GROUP_NAME / sandbox_id
            d.mkdir(parents=True)
            dirs.append(d)
            _write(d / "cpu.cfs_period_us", "100000")
            _write(d / "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)))
    except OSError:
        Cgroup(dirs).remove()
        raise
    return Cgroup(dirs)


def stale_groups() -> list[Path]:
    """Sandbox cgroup directories whose owner process is gone (any agentmeter on this host)."""
    out: list[Path] = []
    bases = [CGROUP_ROOT / GROUP_NAME] + [CGROUP_ROOT / c / GROUP_NAME for c in ("memory", "pids", "cpu")]
    for b in bases:
        if not b.is_dir():
            continue
        for p in b.iterdir():
            owner, sep, _ = p.name.partition("-")
            if p.is_dir() and sep and owner.isdigit() and not pid_alive(int(owner)):
                out.append(p)
    return out


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""Memory, process-count and CPU limits through cgroups: v2 where its controllers are available,
else v1 (these machines are hybrid v1). Where cgroups are not writable (a non-root user without
delegation) the limits are skipped with a warning, never silently."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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
        """SIGKILL every process in the group until none is left (for up to about 0.5 s),
        looking again soon: a process already killed (a sandbox's keeper kills its own at
        stop) leaves the group within a millisecond or two."""
        pause = 0.0005
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def remove(self) -> None:
        self.kill_all()
        self._rmdir()

    def remove_soon(self) -> None:
        """Kill every process in the group now (none is left when this returns), remove the
        emptied directories on a background thread (rmdir may wait for exiting tasks)."""
        self.kill_all()
        _background().submit(self._rmdir)

    def _rmdir(self) -> None:
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


#: fresh groups made ahead, per limits: one is taken by each start and another made off the
#: start's path (never reused: a used group keeps its charges and OOM counts)
_spares: dict[Limits, list[Cgroup]] = {}
_spares_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentmeter-cgroup")
        atexit.register(_drop_spares)
    return _pool


def _forget_in_child() -> None:
    """A forked child neither takes its parent's spare groups (they would be shared) nor
    submits to its parent's worker thread (which it does not have)."""
    global _pool, _spares_lock
    _spares.clear()
    _spares_lock = threading.Lock()
    _pool = None


os.register_at_fork(after_in_child=_forget_in_child)


def _drop_spares() -> None:
    with _spares_lock:
        groups = [g for gs in _spares.values() for g in gs]
        _spares.clear()
    for g in groups:
        g.remove()


def _make_spare(limits: Limits) -> None:
    with contextlib.suppress(OSError):  # the next start makes its own and says why
        g = _create(group_name(f"spare{secrets.token_hex(6)}", os.getpid()), limits)
        with _spares_lock:
            _spares.setdefault(limits, []).append(g)


def create(sandbox_id: str, limits: Limits) -> Cgroup | None:
    """The sandbox's cgroup(s) with ``limits`` (a fresh spare made earlier for the same limits,
    else made now; another spare is then made in the background); None when no limit needs
    one."""
    if limits.memory_mb is None and limits.pids is None and limits.cpus is None:
        return None
    with _spares_lock:
        ready = _spares.get(limits)
        spare = ready.pop() if ready else None
    try:
        group = spare or _create(group_name(sandbox_id, os.getpid()), limits)
        _background().submit(_make_spare, limits)
        return group
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

"""Where local sandboxes live on the host, and removing what a dead owner left there.

A sandbox directory ``<cache>/sandboxes/<owner pid>-<id>`` holds its upper dir and
``owner.json`` (owner and keeper pids); ``remove_stale`` removes directories and cgroups whose
owner died. Root-run keepers also use ``STAGE_DIR`` mount points (see local.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.procinfo import start_time
from agentmeter.sandbox import cgroups
from agentmeter.sandbox.fsnames import remove_tree

#: where a root-run keeper mounts the sandbox tree ("root") and binds the spec's mount sources
#: ("d0", "f1", ...: directories, files) for the sandbox's root to reach: empty mount points on
#: the host, mounted on only in each keeper's own mount namespace
STAGE_DIR = "/run/agentmeter-stage"
#: where a root-run zygote keeper prepares the sandbox's /dev once (zygote_calls.make_dev), in
#: the sandbox's own mount namespace; each exec's bwrap binds it on /dev
DEV_DIR = f"{STAGE_DIR}/dev"


def sandboxes_dir() -> Path:
    return cache_dir() / "sandboxes"


def gone_dir() -> Path:
    """Where stopped sandboxes' directories wait for removal (same filesystem: a rename)."""
    return cache_dir() / "sandboxes.gone"


_remover: ThreadPoolExecutor | None = None


def _forget_remover() -> None:
    global _remover
    _remover = None  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_forget_remover)


def _remove(path: Path, after: Callable[[], None] | None) -> None:
    if after is not None:
        after()
    rmtree(path)


def discard(path: Path, after: Callable[[], None] | None = None) -> None:
    """Remove a stopped sandbox's directory off the caller's path: renamed out of
    ``sandboxes_dir`` at once, its files removed on a background thread (which the interpreter
    joins at exit, as :func:`drain` does; a dead owner's leftovers go in :func:`remove_stale`)
    once ``after`` (the keeper's exit: its overlay unmounted) has returned. Removed on that
    thread too when it cannot be renamed."""
    global _remover
    trash = gone_dir() / path.name
    try:
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, trash)
    except FileNotFoundError:
        if not path.exists():
            if after is not None:
                after()
            return
        trash = path
    except OSError:
        trash = path
    if _remover is None:
        _remover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentmeter-rm")
    _remover.submit(_remove, trash, after)


def drain() -> None:
    """Until every directory :func:`discard` was given is removed."""
    global _remover
    remover, _remover = _remover, None
    if remover is not None:
        remover.shutdown(wait=True)


@dataclass(frozen=True)
class Owner:
    """Who a sandbox directory belongs to: the owner's and the keeper's pids (-1 where unknown)
    and, when recorded, their start times (``procinfo.start_time``): a pid with its start time
    names one process, where a bare pid may have been reused since its process died."""

    pid: int
    keeper: int
    pid_start: str | None = None
    keeper_start: str | None = None

    def owner_alive(self) -> bool:
        return self.pid > 0 and _alive(self.pid, self.pid_start)

    def keeper_alive(self) -> bool:
        return self.keeper > 0 and _alive(self.keeper, self.keeper_start)


def _alive(pid: int, started: str | None) -> bool:
    if started is None:  # not recorded (a directory named before owner.json was written)
        return cgroups.pid_alive(pid)
    return start_time(pid) == started


def owner_record(keeper_pid: int) -> str:
    """``owner.json``'s text for a sandbox this process owns, kept by ``keeper_pid``."""
    return json.dumps({"owner": os.getpid(), "keeper": keeper_pid,
                       "owner_start": start_time(os.getpid()),
                       "keeper_start": start_time(keeper_pid)})


def sandbox_owner(d: Path) -> Owner | None:
    """The owner of a sandbox directory (-1 where unknown); None when the directory cannot be
    attributed yet (an unnamed one younger than a minute may still be starting)."""
    head, sep, _sid = d.name.partition("-")
    named_owner = int(head) if sep and head.isdigit() else -1
    try:
        data = json.loads((d / "owner.json").read_text())
        return Owner(int(data["owner"]), int(data["keeper"]), data.get("owner_start"),
                     data.get("keeper_start"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    if named_owner > 0:
        return Owner(named_owner, -1)  # killed before the keeper was recorded; its keeper exits with stdin
    try:
        if time.time() - d.stat().st_mtime < 60:
            return None
    except FileNotFoundError:
        return None
    return Owner(-1, -1)


def stage_point(i: int, is_dir: bool) -> str:
    """The mount point (made on first need) under which the keeper binds mount source ``i``."""
    point = f"{STAGE_DIR}/{'d' if is_dir else 'f'}{i}"
    if not os.path.lexists(point):
        with contextlib.suppress(FileExistsError):
            if is_dir:
                os.mkdir(point, 0o755)
            else:
                os.close(os.open(point, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o644))
    return point


def rmtree(path: Path) -> None:
    """rmtree that also removes what overlayfs leaves unreadable (its work dir is mode 000) and
    trees of any depth (an agent's): ``fsnames.remove_tree``."""
    remove_tree(path)


def remove_stale() -> int:
    """Remove sandboxes (and cgroups) of dead owners; returns how many directories."""
    removed = 0
    gone = gone_dir()
    for d in gone.iterdir() if gone.is_dir() else []:  # a dead owner's pending removals
        head, sep, _ = d.name.partition("-")
        if sep and head.isdigit() and not cgroups.pid_alive(int(head)):
            rmtree(d)
    top = sandboxes_dir()
    for d in top.iterdir() if top.is_dir() else []:
        owner = sandbox_owner(d)
        if owner is None:
            continue  # an old-style directory still starting, or removed meanwhile
        if owner.owner_alive():
            continue
        if owner.keeper_alive():  # the same process (start time), never a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(owner.keeper, signal.SIGKILL)
        rmtree(d)
        removed += 1
    for g in cgroups.stale_groups():  # only groups whose owner process is dead
        cgroups.Cgroup([g]).remove()
    return removed

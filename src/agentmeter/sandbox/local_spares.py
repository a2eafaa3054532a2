"""Spare local sandboxes: a sandbox for a spec that keeps starting is started ahead, off the next
start's path (``LocalBackend(spares=N)``; off by default).

A spare is exactly the sandbox ``start`` would make for that spec (same spec, same resolved
layers and image configuration, every defence on), started early and never used before it is
handed out. Only specs whose sandbox has nothing made for it alone outside the keeper are
spared: no proxy, socket bridge or pasta (network ``"full"``), and no mount but the harness's own
content-addressed files (netsetup.py's apt configuration), so a spare never holds an old inode of
a task's directory. A spec gets a spare once it has started twice; at most ``N`` specs have one
(the least recently started loses its spare), and a spare older than ``MAX_AGE_S`` is stopped,
not handed out. ``close`` stops them all (an owner that dies without it leaves keepers that
exit with their stdin and directories ``cleanup_stale`` removes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentmeter.paths import cache_dir
from agentmeter.sandbox.layers import LayerMeta
from agentmeter.sandbox.spec import SandboxSpec

if TYPE_CHECKING:
    from agentmeter.sandbox.local import LocalSandbox

#: a spare not taken within this many seconds is stopped (its layers may have been replaced)
MAX_AGE_S = 120.0

Maker = Callable[[SandboxSpec, list[str], LayerMeta], Coroutine[Any, Any, "LocalSandbox"]]


def spare_key(spec: SandboxSpec, lowers: list[str], meta: LayerMeta) -> str | None:
    """What a spare must match to stand in for ``start(spec)``; None: never spared."""
    if spec.network == "full" or spec.exposed_sockets:
        return None
    own = cache_dir() / "network"
    if any(m.source.parent != own for m in spec.mounts):
        return None
    return "\0".join([spec.model_dump_json(), *lowers, meta.model_dump_json()])


class _Spare:
    def __init__(self, task: asyncio.Task[LocalSandbox]) -> None:
        self.task = task
        self.made = time.monotonic()


class Spares:
    """At most ``size`` spares, one per spec (see module docstring)."""

    def __init__(self, make: Maker, size: int) -> None:
        self._make = make
        self._size = size
        self._spares: OrderedDict[str, _Spare] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()  # recently started keys
        self._loop: asyncio.AbstractEventLoop | None = None
        #: spares handed out so far
        self.handed_out = 0

    async def take(self, key: str) -> LocalSandbox | None:
        """A spare for ``key`` (awaited if still starting), or None."""
        if self._loop is not asyncio.get_running_loop():
            return None
        spare = self._spares.pop(key, None)
        if spare is None:
            return None
        try:
            sb = await asyncio.shield(spare.task)
        except asyncio.CancelledError:
            spare.task.get_loop().create_task(_stop(spare))  # nobody will take it now
            raise
        except Exception:  # noqa: BLE001 - the caller starts one itself, and sees why
            return None
        if time.monotonic() - spare.made > MAX_AGE_S:
            await sb.stop()
            return None
        self.handed_out += 1
        return sb

    def started(self, key: str, spec: SandboxSpec, lowers: list[str], meta: LayerMeta) -> None:
        """``key`` was just started (from a spare or not): make it a spare if it started before."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # spares of another (closed) loop cannot be awaited here
            self._spares.clear()
            self._loop = loop
        again = key in self._seen
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > 64:
            self._seen.popitem(last=False)
        if not again or key in self._spares:
            return
        self._spares[key] = _Spare(loop.create_task(self._make(spec, lowers, meta)))
        while len(self._spares) > self._size:
            _, old = self._spares.popitem(last=False)
            loop.create_task(_stop(old))

    async def close(self) -> None:
        """Stop every spare (waiting for those still starting)."""
        spares, self._spares = list(self._spares.values()), OrderedDict()
        if self._loop is asyncio.get_running_loop():
            await asyncio.gather(*(_stop(s) for s in spares))


async def _stop(spare: _Spare) -> None:
    with contextlib.suppress(Exception):
        sb = await spare.task
        await sb.stop()

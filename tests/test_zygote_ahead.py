"""What a keeper forked ahead prepares before its request (zygote_forkserver.keeper_ahead): a user
namespace with the id map of the starts before it, which a start may use only when its own id
map is that one."""

from __future__ import annotations

import os

import pytest

from agentmeter.sandbox import idmap
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote serves root-run sandboxes")


async def _uid_map(backend: LocalBackend) -> list[str]:
    sb = await backend.start(SandboxSpec(workdir="/tmp"))  # exists whatever the ids' owners
    try:
        r = await sb.exec(["cat", "/proc/self/uid_map"], user="root")
    finally:
        await sb.stop()
    assert r.exit_code == 0, r
    return r.stdout.split()


async def test_a_user_namespace_made_ahead_is_used_only_with_its_id_map(
        local_backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next keeper is forked ahead with a user namespace mapped as the last start asked; a
    start that asks for another map must get its own map, never the one prepared."""
    ours = ["0", str(idmap.SHIFT_BASE), str(idmap.SHIFT_SIZE)]
    assert await _uid_map(local_backend) == ours  # the next keeper now holds this map
    other = idmap.SHIFT_BASE + 4 * idmap.SHIFT_SIZE
    monkeypatch.setattr(idmap, "SHIFT_BASE", other)
    assert await _uid_map(local_backend) == ["0", str(other), str(idmap.SHIFT_SIZE)]
    monkeypatch.undo()
    assert await _uid_map(local_backend) == ours

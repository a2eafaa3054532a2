"""Caches on the local sandbox's start path (docs/benchmarks.md, issue 30): each is keyed on what
it is made from, so a changed input is never served a stale result. Unit-level, no sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentmeter.sandbox import seccomp
from agentmeter.sandbox.local import LocalBackend


def test_seccomp_program_is_compiled_once_per_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    first = seccomp.program()
    assert first == seccomp.build_program()
    assert seccomp.program() is first  # cached: not rebuilt per exec
    # a changed rule (a constant, a table entry) is a new key: rebuilt, never the old program
    monkeypatch.setattr(seccomp, "AF_VSOCK", 41)
    changed = seccomp.program()
    assert changed != first and changed == seccomp.build_program()
    monkeypatch.setitem(seccomp.X86_64, "uselib", 135)
    assert seccomp.program() not in (first, changed)
    monkeypatch.undo()
    assert seccomp.program() == first


def test_seccomp_program_fd_holds_the_cached_program() -> None:
    fd = seccomp.program_fd()
    try:
        assert os.read(fd, 1 << 16) == seccomp.program()
    finally:
        os.close(fd)


def test_spare_key_only_for_sandboxes_made_whole_in_the_keeper(tmp_path: Path) -> None:
    from agentmeter.paths import cache_dir
    from agentmeter.sandbox.layers import LayerMeta
    from agentmeter.sandbox.local_spares import spare_key
    from agentmeter.sandbox.spec import ExposedSocket, Mount, SandboxSpec

    meta = LayerMeta()
    plain = spare_key(SandboxSpec(), ["/l/a"], meta)
    assert plain is not None
    # every input of a start is in the key: layers, image configuration, the spec itself
    assert spare_key(SandboxSpec(), ["/l/b"], meta) != plain
    assert spare_key(SandboxSpec(), ["/l/a"], LayerMeta(workdir="/w")) != plain
    assert spare_key(SandboxSpec(hostname="other"), ["/l/a"], meta) != plain
    # never spared: pasta, a socket bridge, a task's own directory (its inode could change)
    assert spare_key(SandboxSpec(network="full"), ["/l/a"], meta) is None
    sock = ExposedSocket(host_path=tmp_path / "s", port=9)
    assert spare_key(SandboxSpec(exposed_sockets=(sock,)), ["/l/a"], meta) is None
    task_dir = Mount(source=tmp_path, target="/tests")
    assert spare_key(SandboxSpec(mounts=(task_dir,)), ["/l/a"], meta) is None
    apt = Mount(source=cache_dir() / "network" / "apt-0123.conf", target="/etc/x.conf")
    assert spare_key(SandboxSpec(mounts=(apt,)), ["/l/a"], meta) is not None


async def test_spares_are_fresh_and_closed(local_backend: LocalBackend) -> None:
    """A spec started twice gets a spare: handed out unused (nothing of the previous sandbox in
    it), every one works, and close() leaves nothing of them behind."""
    from agentmeter.paths import cache_dir
    from agentmeter.sandbox.local import LocalBackend as Backend
    from agentmeter.sandbox.spec import SandboxSpec

    backend = Backend(spares=1)
    spec = SandboxSpec(hostname="spare-test")
    mine = f"{os.getpid()}-"
    try:
        ids = []
        for i in range(3):
            sb = await backend.start(spec)
            ids.append(sb.id)
            r = await sb.exec(f"ls /tmp; echo {i} > /tmp/mark; hostname", user="root")
            assert r.exit_code == 0 and r.stdout.split() == ["spare-test"], r
            await sb.stop()
        assert len(set(ids)) == 3
        assert backend.spares is not None and backend.spares.handed_out == 1
    finally:
        await backend.close()
    left = [p for p in (cache_dir() / "sandboxes").iterdir() if p.name.startswith(mine)]
    assert left == []


def test_cgroup_spares_are_keyed_on_limits() -> None:
    from agentmeter.sandbox import cgroups
    from agentmeter.sandbox.spec import Limits

    if os.geteuid() != 0:
        pytest.skip("cgroups need root here")
    groups = []
    try:
        for mb in (64, 64, 96):  # the second takes the spare the first left; 96 must not
            g = cgroups.create(f"t{mb}", Limits(memory_mb=mb))
            assert g is not None
            groups.append(g)
            cgroups._background().submit(lambda: None).result()  # the spare made meanwhile
            for d in g.dirs:
                for name in ("memory.limit_in_bytes", "memory.max"):
                    if (d / name).exists():
                        assert int((d / name).read_text()) == mb * 1024 * 1024
        assert any("spare" in str(g.dirs[0]) for g in groups[1:2])
    finally:
        for g in groups:
            g.remove()
        cgroups._drop_spares()


def test_a_forked_child_never_takes_its_parents_spare_cgroups() -> None:
    from agentmeter.sandbox import cgroups
    from agentmeter.sandbox.spec import Limits

    if os.geteuid() != 0:
        pytest.skip("cgroups need root here")
    limits = Limits(pids=77)
    g = cgroups.create("fork-parent", limits)
    assert g is not None
    try:
        cgroups._background().submit(lambda: None).result()  # a spare is ready now
        pid = os.fork()
        if pid == 0:  # the child: no spare of the parent's, and its own thread makes groups
            ok = not cgroups._spares and cgroups._pool is None
            child = cgroups.create("fork-child", limits)
            ok = ok and child is not None and "spare" not in str(child.dirs[0])
            if child is not None:
                child.remove()
            cgroups._background().submit(lambda: None).result()
            cgroups._drop_spares()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        g.remove()
        cgroups._drop_spares()

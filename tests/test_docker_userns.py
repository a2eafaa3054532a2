"""agentmeter's own Docker daemon with user-namespace remapping (sandbox/dockeruserns.py): the
subordinate ranges it adds, the notice for a daemon without remapping, and (docker, root) a root
agent whose writes to a host-visible path do not belong to host root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_fixtures import record_daemon, shared_dir
from notices_capture import captured_notices

from agentmeter.sandbox import dockeruserns
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.dockerd import DockerDaemon, daemon_answers, start_own_daemon
from agentmeter.sandbox.dockeruserns import (
    REMAP_FLOOR,
    REMAP_SIZE,
    REMAP_USER,
    ensure_subids,
    map_id,
    pick_start,
    pick_subnet,
)
from agentmeter.sandbox.idmap import SHIFT_BASE, SHIFT_SIZE
from agentmeter.sandbox.spec import AGENT_USER, Mount, SandboxError, SandboxSpec


def test_a_new_range_clears_other_ranges_the_local_backend_and_accounts() -> None:
    assert pick_start([], set()) == REMAP_FLOOR
    # a user's range over the floor, and an account's uid in the next block
    start = pick_start([(REMAP_FLOOR + 10, 5)], {REMAP_FLOOR + REMAP_SIZE + 1})
    assert start == REMAP_FLOOR + 2 * REMAP_SIZE
    # below the floor the local backend's range (idmap.py) is never handed out
    low = pick_start([], set(), floor=SHIFT_BASE - REMAP_SIZE)
    assert low == SHIFT_BASE - REMAP_SIZE
    low = pick_start([(SHIFT_BASE - REMAP_SIZE, 1)], set(), floor=SHIFT_BASE - REMAP_SIZE)
    assert low >= SHIFT_BASE + SHIFT_SIZE


def test_subids_are_added_once_beside_other_users_lines(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text(f"alice:100000:65536\nbob:{REMAP_FLOOR}:65536")  # no final newline
    subgid.write_text("alice:100000:65536\n")
    first = ensure_subids(subuid, subgid, lock_dir=tmp_path)
    assert first.count == REMAP_SIZE and first.start == REMAP_FLOOR + REMAP_SIZE  # clears bob's
    again = ensure_subids(subuid, subgid, lock_dir=tmp_path)
    assert again == first
    line = f"{REMAP_USER}:{first.start}:{REMAP_SIZE}"
    assert subuid.read_text().splitlines() == ["alice:100000:65536", f"bob:{REMAP_FLOOR}:65536",
                                               line]
    assert subgid.read_text().splitlines() == ["alice:100000:65536", line]
    # ranges someone else gave the account differently are not patched over
    subgid.write_text(f"{REMAP_USER}:{first.start + REMAP_SIZE}:{REMAP_SIZE}\n")
    with pytest.raises(SandboxError, match="different or short ranges"):
        ensure_subids(subuid, subgid, lock_dir=tmp_path)


def test_the_bridge_subnet_avoids_the_hosts_networks() -> None:
    assert pick_subnet(["0.0.0.0/0", "192.0.2.0/24"]) == "172.29.254.0/24"  # default route aside
    assert pick_subnet(["172.29.0.0/16", "172.30.254.7/32"]) == "10.213.254.0/24"
    with pytest.raises(SandboxError, match="no free subnet"):
        pick_subnet(["0.0.0.0/1", "128.0.0.0/1"])


def test_host_uids_through_a_uid_map() -> None:
    remapped = "         0 1090519040      65536\n"
    assert map_id(remapped, 0) == 1090519040 and map_id(remapped, 1000) == 1090520040
    assert map_id("0 0 4294967295\n", 1000) == 1000
    assert map_id("", 7) == 7


def test_a_daemon_without_remapping_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dockeruserns, "remapped", lambda timeout=10: False)
    with captured_notices() as said:
        dockeruserns.check_daemon()
        dockeruserns.check_daemon()
    assert len(said) == 1 and "host uid 0" in said[0] and "docs/security.md" in said[0]
    monkeypatch.setattr(dockeruserns, "remapped", lambda timeout=10: True)
    with captured_notices() as said:
        dockeruserns.check_daemon()
    assert said == []


def test_the_policy_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dockeruserns.POLICY_ENV, "Remap")
    assert dockeruserns.policy() == "remap"
    monkeypatch.setenv(dockeruserns.POLICY_ENV, "yes")
    with pytest.raises(SandboxError, match=dockeruserns.POLICY_ENV):
        dockeruserns.policy()


@pytest.fixture(scope="module")
def own_docker() -> Iterator[DockerDaemon]:
    """agentmeter's own remapped daemon (started when it does not answer, stopped after the
    module only then), with DOCKER_HOST pointing at it for the module."""
    if os.geteuid() != 0:
        pytest.skip("starting agentmeter's own dockerd needs root")
    before = os.environ.get("DOCKER_HOST")
    own = dockeruserns.own_daemon()
    try:
        daemon = start_own_daemon(own)
    except SandboxError as e:
        pytest.skip(f"agentmeter's own remapped dockerd could not start: {e}")
    assert daemon_answers(host=own.host)
    # under xdist another worker may find it answering and use it: the controller stops it
    # at the end of the run (docker_fixtures.stop_shared_dockerd); alone, the module does
    shared = shared_dir()
    if shared is not None and daemon.started and daemon.proc is not None:
        record_daemon(shared / "dockerd-userns.pid", daemon.proc.pid)
    try:
        yield daemon
    finally:
        if shared is None:
            daemon.stop()
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before


@pytest.mark.docker
@pytest.mark.slow
async def test_a_root_agent_is_not_host_root_on_agentmeters_own_daemon(
        own_docker: DockerDaemon, tmp_path: Path) -> None:
    """A root agent writes into a bind-mounted host directory: the file's host owner is the
    remapped root, not 0, and its uid_map shows the shift; the agent account's processes are
    still found and killed from the host (docker top shows shifted uids)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    box = await DockerBackend().start(SandboxSpec(
        user="root", mounts=(Mount(source=shared, target="/shared", read_only=False),)))
    try:
        r = await box.exec("id -u; cat /proc/self/uid_map; echo x > /shared/by-root", user="root")
        assert r.exit_code == 0, r.stderr
        uid, inside, outside, _count = r.stdout.split()
        assert (uid, inside) == ("0", "0")
        assert int(outside) != 0, "the container's root is host root"
        owner = (shared / "by-root").stat()
        assert owner.st_uid == int(outside) and owner.st_gid != 0
        r = await box.exec("setsid nohup sleep 600 >/dev/null 2>&1 & echo started",
                           user=AGENT_USER)
        assert r.stdout.strip() == "started"
        assert await box.kill_user_processes(AGENT_USER) == 1
    finally:
        await box.stop()

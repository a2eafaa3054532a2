"""The Ray executor on a real cluster on this machine: a head and two worker nodes, each a
separate ``ray start`` process with its own ``agentmeter_slots`` (tests/ray_fixtures.py), and a
real PostgreSQL server (tests/pg_fixtures.py). One cluster for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_fixtures import postgres_url_fixture  # noqa: F401
from ray_fixtures import RayCluster, descendants, leftover_pids, start_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with start_cluster(worker_slots=(2, 1)) as c:
        yield c
    # teardown left no process of ours behind: no node, no Ray worker, nothing naming its dir
    assert all(node.proc.poll() is not None for node in c.nodes)
    assert not [pid for node in c.nodes for pid in descendants(node.proc.pid)]
    assert not leftover_pids(c.root)


def test_the_nodes_register_with_their_slots(cluster: RayCluster) -> None:
    state = cluster.wait_registered()
    ours = {e["fixture_name"]: e for e in state if e["fixture_name"] is not None and e["Alive"]}
    assert set(ours) == {"head", "worker1", "worker2"}
    slots = {name: e["Resources"].get("agentmeter_slots") for name, e in ours.items()}
    # the head declares no slots (trials never run there); each worker its own number
    assert slots == {"head": None, "worker1": 2.0, "worker2": 1.0}
    assert len({e["NodeID"] for e in ours.values()}) == 3

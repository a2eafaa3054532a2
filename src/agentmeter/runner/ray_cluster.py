"""The Ray executor's cluster: connecting, and the pre-flight before anything is written.

The store must be PostgreSQL (every node writes it), the cluster reachable (a quick TCP check
first: ``ray.init`` towards a dead address waits minutes), some live node must declare
``agentmeter_slots``, and a probe task pinned to each such node (``NodeAffinitySchedulingStrategy``)
must find its sandbox tools, the store, the models' keys in its own environment and the
driver's agentmeter version: each problem is one line naming the node.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import agentmeter
from agentmeter.runner import ray_node
from agentmeter.store.db import Store

if TYPE_CHECKING:
    from agentmeter.runner.session import PreparedRun

#: the Ray resource a node declares: how many sandboxes it runs at once
SLOTS = "agentmeter_slots"
#: a node's probe may install missing host tools first
PROBE_TIMEOUT_S = 600.0
#: how long tries may wait with no node declaring slots alive before the run stops
NO_NODES_S = 120.0


class ClusterError(Exception):
    """The cluster cannot run this request (said in one line); nothing was written."""


def one_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


@dataclass
class Cluster:
    """A connected cluster: its nodes that declare slots, by node id (their address, slots)."""

    address: str
    nodes: dict[str, tuple[str, float]]
    #: this process connected (and disconnects at the end)
    owned: bool

    def close(self) -> None:
        if self.owned:
            import ray

            ray.shutdown()


def connect(address: str, store: Store, prepared: PreparedRun) -> Cluster:
    """Pre-flight: connect to the cluster and probe its slot nodes (ClusterError: one line)."""
    if store.engine.dialect.name != "postgresql":
        raise ClusterError(f"--executor ray: the store must be a PostgreSQL database every node "
                           f"reaches (set AGENTMETER_DATABASE_URL=postgresql+psycopg://…); "
                           f"this store is {store.where}")
    try:
        import ray
    except ImportError:
        raise ClusterError("--executor ray needs the ray package: pip install "
                           "'agentmeter[ray]'") from None
    owned = not ray.is_initialized()
    if owned:
        _reachable(address)
        kept = _signal_handlers()
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                     namespace="agentmeter")
        except Exception as e:
            raise ClusterError(f"--ray-address {address}: no Ray cluster reachable "
                               f"({one_line(e)})") from None
        finally:  # Ray's own SIGTERM handler would kill the driver: Ctrl-C/SIGTERM stop cleanly
            _restore(kept)
    cluster = Cluster(address, {}, owned)
    try:
        cluster.nodes = slot_nodes()
        if not cluster.nodes:
            raise ClusterError(f"--executor ray: no node of the cluster at {address} declares "
                               f"{SLOTS} (start nodes with ray start … --resources "
                               f"'{{\"{SLOTS}\": N}}', N = sandboxes the node runs at once)")
        _probe(cluster, store, prepared)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


def slot_nodes() -> dict[str, tuple[str, float]]:
    """The cluster's live nodes that declare slots: node id -> (address, slots)."""
    import ray

    nodes: dict[str, tuple[str, float]] = {}
    for n in ray.nodes():  # type: ignore[no-untyped-call]
        slots = float(n.get("Resources", {}).get(SLOTS, 0))
        if n.get("Alive") and slots > 0:
            nodes[n["NodeID"]] = (str(n.get("NodeManagerAddress", "?")), slots)
    return nodes


def _gcs_address(address: str) -> str | None:
    """``host:port`` of the cluster's head as ray.init would find it (None: Ray decides)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address:
            current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
            try:
                address = current.read_text().strip()
            except OSError:
                return None  # ray.init says there is no cluster, at once
    return address.removeprefix("ray://") if ":" in address else None


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Something listens at the head's address: ray.init towards nothing waits minutes."""
    target = _gcs_address(address)
    if target is None:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as e:
        raise ClusterError(f"--ray-address {address}: no Ray cluster reachable at {target} "
                           f"({e})") from None


def _probe(cluster: Cluster, store: Store, prepared: PreparedRun) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    req = prepared.request
    models = sorted({c.record.model.name for c in prepared.configs if c.agent.uses_model})
    files = model_files(prepared)
    refs = {}
    for node, (addr, _) in cluster.nodes.items():
        task = ray.remote(ray_node.probe).options(
            num_cpus=0, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
        refs[node] = (addr, task.remote(req.backend, store_url(store), models, files,
                                        req.judge_model))
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    problems: list[str] = []
    for node, (addr, ref) in refs.items():
        name = f"node {addr} ({node[:12]})"
        try:
            probe = ray_node.NodeProbe.model_validate_json(
                ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except Exception as e:
            problems.append(f"{name}: cannot run agentmeter tasks: {one_line(e)}")
            continue
        name = f"node {probe.hostname} {addr} ({node[:12]})"
        if probe.version != agentmeter.__version__:
            problems.append(f"{name}: agentmeter {probe.version}, the driver runs "
                            f"{agentmeter.__version__}")
        problems += [f"{name}: {p}" for p in probe.problems]
    if problems:
        raise ClusterError("; ".join(problems) if len(problems) == 1 else
                           f"{len(problems)} problems on the cluster:\n  " + "\n  ".join(problems))


def store_url(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def model_files(prepared: PreparedRun) -> ray_node.ModelFiles:
    req = prepared.request
    return ray_node.ModelFiles(
        models_toml=Path(req.models_file).read_text() if req.models_file else None,
        prices=[Path(p).read_text() for p in req.prices], allow_unpriced=req.allow_unpriced)



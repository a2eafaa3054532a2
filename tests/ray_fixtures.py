"""A real Ray cluster on this machine for executor tests: a head and worker nodes, each a separate
``ray start --block`` process (its own process group, temp dir, ports and ``agentmeter_slots``).

Each node's ``ray start --block`` makes itself a process-group leader; its raylet, object store
and agents are in that group, its Ray workers (and the sandboxes they start) are its descendants
in groups of their own. Teardown, and ``RayCluster.kill_node`` (a node dying: SIGKILL), signal
only what this fixture started: those groups, those descendants, and any leftover process whose
command line or open files name the fixture's temp dir. ``ray stop`` is never used: it stops every Ray
process on the machine, other people's clusters included.

The head (GCS) is told to declare a node dead after ~2 s of failed health checks instead of the
default ~30 s, so node-death tests do not wait for long.

Use: ``from ray_fixtures import RayCluster, start_cluster``; a module-scoped fixture calling
``start_cluster`` (see tests/test_ray_cluster.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RAY = str(Path(sys.executable).with_name("ray"))

#: faster failure detection by the GCS (the defaults take ~30 s to declare a node dead)
HEAD_ENV = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "4"}
#: per node: the object store is a few MiB of task blobs here, not 30 % of the machine's memory
OBJECT_STORE_BYTES = 100 * 1024 * 1024


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all held open while chosen, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


@dataclass
class RayNode:
    name: str
    slots: int
    temp_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path
    #: the head's GCS port (0 for a worker)
    port: int = 0
    #: killed or removed on purpose (no longer expected in the cluster)
    gone: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


@dataclass
class RayCluster:
    """A running cluster: ``address`` (``127.0.0.1:PORT``, what ``--ray-address`` takes)."""

    address: str
    root: Path
    head: RayNode
    workers: list[RayNode] = field(default_factory=list)

    @property
    def nodes(self) -> list[RayNode]:
        return [self.head, *self.workers]

    def add_worker(self, name: str, slots: int, env: dict[str, str] | None = None,
                   timeout: float = 120) -> RayNode:
        """Start one more worker node and wait until the cluster lists it alive."""
        node = _start_node(self.root, name, slots, head_address=self.address, env=env)
        self.workers.append(node)
        self.wait_registered(timeout=timeout)
        return node

    def state(self) -> list[dict[str, Any]]:
        """``ray.nodes()`` read by a separate driver process (this process never joins Ray),
        each entry with ``"fixture_name"``: the name of our node it is (None: not ours)."""
        code = ("import json, sys, ray\n"
                "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "print('NODES=' + json.dumps(ray.nodes()))\n")
        r = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True,
                           text=True, timeout=60, env=_env({}))
        line = next((x for x in r.stdout.splitlines() if x.startswith("NODES=")), None)
        assert line is not None, f"reading the cluster's nodes failed:\n{r.stderr[-3000:]}"
        nodes: list[dict[str, Any]] = json.loads(line[len("NODES="):])
        for entry in nodes:
            sock = str(entry.get("RayletSocketName", ""))
            entry["fixture_name"] = next((n.name for n in self.nodes
                                          if sock.startswith(str(n.temp_dir) + "/")), None)
        return nodes

    def wait_registered(self, timeout: float = 120) -> list[dict[str, Any]]:
        """Poll until every live node of ours is listed alive with its resources."""
        deadline = time.monotonic() + timeout
        self.wait_gcs(timeout)
        expected = [n for n in self.nodes if not n.gone]
        while True:
            for n in expected:
                assert n.alive(), f"ray node {n.name} exited:\n{n.log_tail()}"
            state = self.state()
            alive = {e["fixture_name"] for e in state if e["Alive"]}
            if {n.name for n in expected} <= alive:
                return state
            assert time.monotonic() < deadline, f"nodes not registered in {timeout} s: {state}"
            time.sleep(0.5)

    def wait_gcs(self, timeout: float = 120) -> None:
        """Until the head's GCS accepts connections (before that, ``ray.init`` would hang)."""
        deadline = time.monotonic() + timeout
        host, port = self.address.rsplit(":", 1)
        while True:
            assert self.head.alive(), f"ray head exited:\n{self.head.log_tail()}"
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 1):
                return
            assert time.monotonic() < deadline, f"the GCS did not listen in {timeout} s"
            time.sleep(0.2)

    def node_id(self, node: RayNode) -> str:
        for e in self.state():
            if e["fixture_name"] == node.name and e["Alive"]:
                return str(e["NodeID"])
        raise AssertionError(f"node {node.name} is not alive in the cluster")

    def kill_node(self, node: RayNode) -> None:
        """The node dies at once: SIGKILL to its whole process group (raylet, object store,
        its Ray workers and what they started), as when a machine loses power."""
        node.gone = True
        doomed = descendants(node.proc.pid)
        _kill_group(node.proc, signal.SIGKILL)
        # a node's Ray workers run in process groups of their own: they die with the node too
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(10)

    def remove_node(self, node: RayNode) -> None:
        """Stop one worker node for good (SIGTERM, then SIGKILL to what is left of it)."""
        node.gone = True
        doomed = identities(descendants(node.proc.pid))
        with contextlib.suppress(ProcessLookupError):
            node.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(15)
        _kill_group(node.proc, signal.SIGKILL)
        # up to 15 s later: only the same processes (pid and start time), never a reused pid
        _kill_survivors(doomed)
        node.proc.wait(10)

    def stop(self) -> None:
        """Stop the nodes this fixture started, and nothing else: SIGTERM to each ``ray start``
        (workers first: a worker whose GCS is gone does not exit by itself), then SIGKILL to
        its process group and to any leftover process naming the fixture's temp dir."""
        doomed = identities({pid for node in self.nodes for pid in descendants(node.proc.pid)})
        for group in (self.workers, [self.head]):
            for node in group:
                with contextlib.suppress(ProcessLookupError):
                    node.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for node in group:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(max(0.1, deadline - time.monotonic()))
        for node in self.nodes:
            _kill_group(node.proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(10)
        _kill_survivors(doomed)
        for pid in leftover_pids(self.root):  # found just now, by their files: still ours
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _kill_survivors(snapshot: dict[int, str]) -> None:
    """SIGKILL the processes of an ``identities`` snapshot that still run (the same pid with
    the same start time): a pid taken seconds ago may belong to another process by now."""
    for pid in survivors(snapshot):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (children, their children, …)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def identities(pids: set[int]) -> dict[int, str]:
    """Each live process of ``pids`` with its start time (clock ticks since boot): a pid and its
    start time name one process, where a pid alone may be reused after it dies (pid_max is
    32768 here, and a full suite starts many thousands)."""
    found = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            found[pid] = fields[19]
    return found


def survivors(snapshot: dict[int, str]) -> list[int]:
    """The processes of an ``identities`` snapshot still running: the same pid with the same
    start time, and not a zombie (state ``Z``: dead, waiting for its parent to reap it)."""
    alive = []
    for pid, started in snapshot.items():
        fields = _stat_fields(pid)
        if fields is not None and fields[19] == started and fields[0] != "Z":
            alive.append(pid)
    return alive


def leftover_pids(root: Path) -> list[int]:
    """Processes that name a path under ``root`` (the fixture's temp dir) in their command line
    or hold a file under it open (Ray's processes retitle themselves, e.g. ``ray::IDLE``, but
    keep their session's log files open)."""
    found = []
    needle = str(root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle.encode() in (entry / "cmdline").read_bytes() or any(
                    os.readlink(fd).startswith(needle + "/") for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    # the group of a process we started in its own session: its pgid is its pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", **extra})
    return env


def _start_node(root: Path, name: str, slots: int, *, head_address: str | None = None,
                env: dict[str, str] | None = None) -> RayNode:
    temp_dir = root / name
    temp_dir.mkdir()
    log = root / f"{name}.log"
    ports = iter(free_ports(7))
    port = 0
    cmd = [RAY, "start", "--block", "--disable-usage-stats",
           "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
           f"--num-cpus={max(slots, 1)}", f"--object-store-memory={OBJECT_STORE_BYTES}",
           f"--node-manager-port={next(ports)}", f"--object-manager-port={next(ports)}",
           f"--metrics-export-port={next(ports)}", f"--runtime-env-agent-port={next(ports)}",
           f"--dashboard-agent-listen-port={next(ports)}",
           f"--dashboard-agent-grpc-port={next(ports)}"]
    cmd.append(f"--resources={json.dumps({'agentmeter_slots': slots} if slots else {})}")
    if head_address is None:
        port = next(ports)
        cmd += ["--head", f"--port={port}", "--include-dashboard=false"]
    else:
        cmd.append(f"--address={head_address}")
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_env(env or {}), start_new_session=True)
    return RayNode(name=name, slots=slots, temp_dir=temp_dir, proc=proc, log=log, port=port)


@contextlib.contextmanager
def start_cluster(worker_slots: tuple[int, ...] = (2, 1),
                  worker_env: dict[str, str] | None = None) -> Iterator[RayCluster]:
    """A head (no ``agentmeter_slots``: trials never run on it) and one worker node per entry
    of ``worker_slots`` declaring that many slots; stopped on exit, also on failure."""
    if shutil.which(RAY) is None:
        raise RuntimeError(f"{RAY} not found: pip install ray")
    # short: Ray's Unix socket paths live under it (108-byte limit)
    root = Path(tempfile.mkdtemp(prefix="amray-", dir="/tmp"))
    head = _start_node(root, "head", 0, env=HEAD_ENV)
    cluster = RayCluster(address=f"127.0.0.1:{head.port}", root=root, head=head)
    try:
        cluster.wait_gcs()
        for i, slots in enumerate(worker_slots, start=1):
            cluster.workers.append(_start_node(root, f"worker{i}", slots, head_address=cluster.address,
                                               env=worker_env))
        try:
            cluster.wait_registered()
        except AssertionError:
            # a loaded machine: a raylet may miss ``ray start``'s fixed 30 s start-up wait;
            # such a node is started once more
            for i, node in enumerate(cluster.workers):
                if not node.alive():
                    node.gone = True
                    cluster.workers[i] = _start_node(root, f"{node.name}r", node.slots,
                                                     head_address=cluster.address, env=worker_env)
            cluster.wait_registered()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)

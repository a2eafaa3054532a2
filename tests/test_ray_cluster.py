"""The Ray executor on a real cluster on this machine: a head and two worker nodes, each a
separate ``ray start`` process with its own ``agentmeter_slots`` (tests/ray_fixtures.py), and a
real PostgreSQL server (tests/pg_fixtures.py). One cluster for the module."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_fixtures import postgres_url_fixture  # noqa: F401
from polling import eventually
from ray_fixtures import (
    RayCluster,
    descendants,
    free_port,
    identities,
    leftover_pids,
    start_cluster,
    survivors,
)
from taskgen import make_task

from agentmeter.records import TokenUsage, TrialRecord, TrialStatus
from agentmeter.store.db import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with start_cluster(worker_slots=(2, 1)) as c:
        yield c
    # teardown left no process of ours behind: no node, no Ray worker (each keeps its node's
    # log files open), nothing naming the cluster's directory
    assert all(node.proc.poll() is not None for node in c.nodes)
    assert not leftover_pids(c.root)


def test_the_nodes_register_with_their_slots(cluster: RayCluster) -> None:
    state = cluster.wait_registered()
    ours = {e["fixture_name"]: e for e in state if e["fixture_name"] is not None and e["Alive"]}
    assert set(ours) == {n.name for n in cluster.nodes}
    slots = {name: e["Resources"].get("agentmeter_slots") for name, e in ours.items()}
    # the head declares no slots (trials never run there); each worker its own number
    assert slots == {"head": None, cluster.workers[0].name: 2.0, cluster.workers[1].name: 1.0}
    assert len({e["NodeID"] for e in ours.values()}) == 3


# --- helpers -------------------------------------------------------------------------------

CLI = [sys.executable, "-m", "agentmeter.cli"]


def _env(url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTMETER_DATABASE_URL", "RAY_ADDRESS")}
    if url is not None:
        env["AGENTMETER_DATABASE_URL"] = url
    return env


def _cli(*args: str, url: str | None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(url))


def _errors(stderr: str) -> list[str]:
    """The error lines (the progress bar's last frame may be printed too)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [x for x in stderr.splitlines() if x.startswith("error:")]


def _ray(cluster: RayCluster) -> list[str]:
    return ["--executor", "ray", "--ray-address", cluster.address]


def _table(out: str) -> list[dict[str, Any]]:
    """The end-of-run results table (``--json``) without what differs between two runs of the
    same grid (wall times)."""
    rows = json.loads(out)["configs"]
    for row in rows:
        row.pop("median_trial_s")
        row["cost_usd"] = None if row["cost_usd"] is None else round(row["cost_usd"], 9)
    return sorted(rows, key=lambda r: r["config_id"])


def _check_once_and_accounted(st: Store, rid: str, configs: int, tasks: int) -> list[TrialRecord]:
    """Exactly one scored result per (configuration, task), and every stored model call
    counted once: each try's count and tokens are its own stored calls, and the run's calls are
    the sum over its tries. Returns every try."""
    final = st.latest_completed_trials(rid)
    assert len(final) == configs * tasks
    assert len({(t.config_id, t.task_id) for t in final}) == configs * tasks
    assert all(t.status.scored for t in final), [(t.id, t.status, t.error) for t in final]
    tries = st.trials(rid)
    assert not [t for t in tries if not t.status.final], "a try was left running"
    total = 0
    for t in tries:
        calls = [c for c in st.model_calls(rid, t.id, t.try_number) if c.purpose == "agent"]
        usage = TokenUsage()
        for c in calls:
            usage = usage + c.usage
        # a try that started no call knows its usage is zero (runner/trial.py: _apply_meter);
        # one abandoned before its meter was read has none: both are its stored calls' sum
        known_zero = TokenUsage(input=0, output=0, cache_creation=0, cache_read=0, reasoning=0)
        allowed = (usage, known_zero) if not calls else (usage,)
        assert t.model_calls == len(calls) and t.usage in allowed, \
            (t.id, t.try_number, t.status, t.usage, usage)
        assert [c.seq for c in calls] == list(range(len(calls)))
        total += len(calls)
    assert len(st.model_calls(rid)) == total  # no call belongs to no try, none to two
    return tries


def _running_on(st: Store, rid: str, node_id: str) -> list[TrialRecord]:
    return [t for t in st.trials(rid) if t.status is TrialStatus.RUNNING
            and node_id in (t.lease_owner or "")]


# --- the grid across the cluster -------------------------------------------------------------

GRID = ["-a", "oracle", "-a", "nop", "-a", "native", "-m", "scripted/solver", "-m", "scripted/quitter"]


def test_a_grid_across_the_workers_gives_the_local_results_table(
        cluster: RayCluster, postgres_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for i in range(3):
        make_task(suite, f"t{i}")
    local = _cli("run", "-s", str(suite), *GRID, "--run-id", "grid-local", "--store",
                 str(tmp_path / "local"), "-c", "2", "--json", url=None)
    assert local.returncode == 0, local.stderr[-3000:]
    runs = tmp_path / "runs"
    r = _cli("run", "-s", str(suite), *GRID, "--run-id", "grid", "--store", str(runs),
             "-c", "3", "--json", *_ray(cluster), url=postgres_url)
    assert r.returncode == 0, r.stderr[-3000:]
    table = _table(r.stdout)
    assert table == _table(local.stdout)
    assert {row["passed"] for row in table} == {0, 3}  # real verdicts: solvers pass, others fail
    with Store.open(postgres_url, runs_dir=runs) as st:
        tries = _check_once_and_accounted(st, "grid", configs=4, tasks=3)
        assert len(tries) == 12  # nothing retried
        owners = {(t.lease_owner or "").split(":")[1] for t in tries}
        arts = st.artifacts("grid")
        run_dir = st.run_dir("grid")
    # Ray spread the trials over both workers (never the head: it declares no slot)
    assert owners == {cluster.node_id(w) for w in cluster.workers}, owners
    # the artifacts came back into the driver's store directory
    assert arts and all((run_dir / a.relpath).is_file() for a in arts)
    shown = _cli("show", "grid", "--store", str(runs), "--json", url=postgres_url)
    assert shown.returncode == 0 and _table(shown.stdout) == table


# --- the driver dies mid-run, then resume -----------------------------------------------------


def test_the_driver_killed_mid_run_then_resume_counts_everything_once(
        cluster: RayCluster, postgres_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for i in range(3):
        make_task(suite, f"t{i}")
    runs, rid = tmp_path / "runs", "driver-killed"
    log = tmp_path / "driver.log"
    with log.open("w") as out:  # 120 look-around turns: the kill lands mid-trial
        driver = subprocess.Popen([*CLI, "run", "-s", str(suite), "-a", "native", "-m",
                                   "scripted/explorer-120", "--run-id", rid, "--store", str(runs),
                                   *_ray(cluster)], stdout=out, stderr=subprocess.STDOUT,
                                  env=_env(postgres_url))
    seen: dict[tuple[str, int], int] = {}  # the tries running just before the kill: calls
    try:
        def calls_stored_mid_trial() -> bool:
            assert driver.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(Exception), Store.open(postgres_url, runs_dir=runs) as st:
                seen.clear()
                seen.update({(t.id, t.try_number): len(st.model_calls(rid, t.id, t.try_number))
                             for t in st.trials(rid) if t.status is TrialStatus.RUNNING})
                return max(seen.values(), default=0) >= 3
            return False
        assert eventually(calls_stored_mid_trial, timeout=300, interval=0.2)
    finally:
        driver.kill()
        driver.wait()

    r = _cli("resume", rid, "--store", str(runs), "--json", url=postgres_url)
    assert r.returncode == 0, r.stderr[-3000:]
    with Store.open(postgres_url, runs_dir=runs) as st:
        tries = _check_once_and_accounted(st, rid, configs=1, tasks=3)
    by_try = {(t.id, t.try_number): t for t in tries}
    for key, n in seen.items():
        closed = by_try[key]
        if closed.status is TrialStatus.INFRA_INVALID:  # closed with its stored calls' spending
            assert closed.model_calls >= n
            assert [t for t in tries if t.id == key[0] and t.try_number > key[1]]  # run again
        else:  # it ended on its node between the look and the kill
            assert closed.status.scored
    killed = [by_try[k] for k in seen if by_try[k].status is TrialStatus.INFRA_INVALID]
    assert any(t.model_calls >= 3 for t in killed), "the kill did not land mid-trial"


# --- bad input: one line, nothing written ------------------------------------------------------


def test_no_cluster_or_a_sqlite_store_is_refused_before_anything_is_written(
        cluster: RayCluster, postgres_url: str, tmp_path: Path) -> None:
    make_task(tmp_path / "suite", "t0")
    base = ["run", "-s", str(tmp_path / "suite"), "-a", "oracle", "--store", str(tmp_path / "runs")]
    cases = [  # (run id, arguments, store URL, what the message names)
        ("nocluster", ["--executor", "ray", "--ray-address", f"127.0.0.1:{free_port()}"],
         postgres_url, "ray"),
        ("sqlite", _ray(cluster), None, "AGENTMETER_DATABASE_URL"),
    ]
    for rid, args, url, named in cases:
        r = _cli(*base, "--run-id", rid, *args, url=url, timeout=300)
        assert r.returncode == 2, (rid, r.stdout, r.stderr[-3000:])
        lines = _errors(r.stderr)
        assert len(lines) == 1 and named in lines[0], (rid, r.stderr[-3000:])
        assert "Traceback" not in r.stderr
    with Store.open(postgres_url, runs_dir=tmp_path / "runs") as st:
        assert st.get_run("nocluster") is None
    assert not (tmp_path / "runs" / "agentmeter.db").exists() or \
        Store.open(tmp_path / "runs").get_run("sqlite") is None


# --- a worker node dies mid-run ------------------------------------------------------------------


def test_a_worker_node_killed_mid_run_loses_and_double_counts_nothing(
        cluster: RayCluster, postgres_url: str, tmp_path: Path) -> None:
    """worker1 (two slots) is SIGKILLed, raylet and all, while it runs tries: those tries are
    closed infra_invalid with their stored calls and run again on worker2; every trial ends
    with exactly one scored result and every call is counted once."""
    suite = tmp_path / "suite"
    for i in range(3):
        make_task(suite, f"t{i}")
    runs, rid = tmp_path / "runs", "node-killed"
    victim = cluster.workers[0]
    victim_id = cluster.node_id(victim)
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen([*CLI, "run", "-s", str(suite), "-a", "native", "-m",
                                   "scripted/explorer-40", "--run-id", rid, "--store", str(runs),
                                   "-c", "3", *_ray(cluster)], stdout=out,
                                  stderr=subprocess.STDOUT, env=_env(postgres_url))
    try:
        def victim_mid_trial() -> bool:
            assert driver.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(Exception), Store.open(postgres_url, runs_dir=runs) as st:
                return any(len(st.model_calls(rid, t.id, t.try_number)) >= 3
                           for t in _running_on(st, rid, victim_id))
            return False
        assert eventually(victim_mid_trial, timeout=300, interval=0.2)
        # which tries run there, read before the kill: once the node is gone the driver closes
        # them at once, and a read after it could find none still running
        with Store.open(postgres_url, runs_dir=runs) as st:
            on_victim = {(t.id, t.try_number) for t in _running_on(st, rid, victim_id)}
        doomed = identities(descendants(victim.proc.pid))
        cluster.kill_node(victim)
        assert driver.wait(600) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # the node is gone, its Ray workers and sandboxes with it
    assert not survivors(doomed)
    with Store.open(postgres_url, runs_dir=runs) as st:
        tries = _check_once_and_accounted(st, rid, configs=1, tasks=3)
    by_try = {(t.id, t.try_number): t for t in tries}
    assert on_victim
    for key in on_victim:
        dead = by_try[key]
        assert dead.status is TrialStatus.INFRA_INVALID, (dead.status, dead.error)
        assert dead.model_calls >= 3  # its spending kept
        again = [t for t in tries if t.id == key[0] and t.try_number > key[1]]
        assert again and again[-1].status.scored
        # run again on the survivor
        assert cluster.node_id(cluster.workers[1]) in (again[-1].lease_owner or "")


def test_a_node_without_the_sandbox_tools_is_named_before_anything_is_written(
        cluster: RayCluster, postgres_url: str, tmp_path: Path) -> None:
    """A third worker whose PATH has neither bubblewrap nor apt-get (it cannot install them):
    the run is refused in one line naming that node; nothing is written."""
    bare = cluster.add_worker("bare", 1, env={"PATH": str(Path(sys.executable).parent)})
    try:
        bare_id = cluster.node_id(bare)
        make_task(tmp_path / "suite", "t0")
        runs = tmp_path / "runs"
        r = _cli("run", "-s", str(tmp_path / "suite"), "-a", "oracle", "--store", str(runs),
                 "--run-id", "bare", *_ray(cluster), url=postgres_url, timeout=300)
        assert r.returncode == 2, r.stdout + r.stderr[-3000:]
        lines = _errors(r.stderr)
        assert len(lines) == 1, r.stderr[-3000:]
        assert bare_id[:12] in lines[0] and "bwrap" in lines[0], lines[0]
        with Store.open(postgres_url, runs_dir=runs) as st:
            assert st.get_run("bare") is None
    finally:
        cluster.remove_node(bare)

"""The Ray executor's parts that need no cluster: tasks shipped as tar blobs, artifacts coming
back, the node side of a try (its lease, the owner fence) on a real PostgreSQL store with real
sandboxes, and the pre-flight refusals that need no cluster. The cluster itself:
tests/test_ray_cluster.py."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import threading
from pathlib import Path

import pytest
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from polling import eventually
from taskgen import make_scenario, make_task
from typer.testing import CliRunner

from agentmeter.records import AgentSpec, ConfigRecord, ModelSpec, RunRecord, TrialRecord, TrialStatus
from agentmeter.runner import node_worker, ray_node, shipping
from agentmeter.store.db import Store
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import load_suites


def _paths(task: Task) -> list[Path]:
    found: list[Path] = []
    shipping._map_paths(task, lambda p: found.append(p) or p)  # type: ignore[func-returns-value]
    return found


def test_a_shipped_scenario_step_finds_every_file_it_names(tmp_path: Path) -> None:
    root = make_scenario(tmp_path / "suite", "sc", steps=2)
    step = next(t for t in load_suites([str(root)]).tasks if t.scenario_position == 2)
    outside = [p for p in _paths(step) if step.path not in p.parents and p != step.path]
    assert outside, "the step names files outside its own directory (the scenario's)"
    blob, model = shipping.pack_task(step)
    assert shipping.pack_task(step)[0] == blob  # the same task, the same blob: one cache entry
    cache = tmp_path / "node-cache"
    shipped = shipping.unpack_task(blob, model, cache)
    again = shipping.unpack_task(blob, model, cache)  # unpacked once, found the second time
    assert shipped == again
    assert (shipped.id, shipped.digest, shipped.instruction) == (step.id, step.digest, step.instruction)
    for here, there in zip(_paths(step), _paths(shipped), strict=True):
        assert cache / shipping.blob_digest(blob) in there.parents
        assert there.exists() == here.exists(), there
        if here.is_file():
            assert there.read_bytes() == here.read_bytes()
    assert str(tmp_path / "suite") not in model  # no driver path travels


@pytest.mark.parametrize("entry", ["../escape", "/etc/escape", "link"])
def test_artifacts_blob_cannot_write_outside_the_run_directory(tmp_path: Path, entry: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(entry)
        if entry == "link":  # a link out, then a file through it
            info.type, info.linkname = tarfile.SYMTYPE, "/etc"
            tar.addfile(info)
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    dest = tmp_path / "run"
    with pytest.raises(tarfile.TarError):
        shipping.unpack_dir(buf.getvalue(), dest)
    assert not (tmp_path / "escape").exists() and not Path("/etc/escape").exists()


def test_artifacts_blob_with_the_cve_2025_4517_chain_writes_nothing_outside(
        tmp_path: Path) -> None:
    """Security review finding 10: tarfile's data filter (Python < 3.11.13 / 3.12.11) is beaten
    by a symlink chain longer than PATH_MAX; the node's blob is unpacked with untar.py."""
    from test_hostile_copyout import _cve_2025_4517, _tar

    outside = tmp_path / "outside"
    outside.mkdir()
    with pytest.raises(tarfile.TarError):
        shipping.unpack_dir(_tar(lambda add: _cve_2025_4517(add, outside.name)),
                            tmp_path / "run")
    assert list(outside.iterdir()) == []


def test_artifacts_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "scratch"
    (src / "trials" / "t" / "agent").mkdir(parents=True)
    (src / "trials" / "t" / "agent" / "log.txt").write_text("hello")
    dest = tmp_path / "run"
    shipping.unpack_dir(shipping.pack_dir(src), dest)
    assert (dest / "trials" / "t" / "agent" / "log.txt").read_text() == "hello"
    assert shipping.pack_dir(tmp_path / "missing") == b""


def _job(store: Store, url: str, task: Task, run_id: str, *, renew_every_s: float
         ) -> tuple[ray_node.NodeJob, bytes]:
    cfg = ConfigRecord.of(AgentSpec(name="oracle"), ModelSpec(name="none"))
    store.create_run(RunRecord(id=run_id, backend="local", attempts=1, concurrency=1))
    store.upsert_config(cfg, run_id=run_id)
    store.upsert_task(task.to_record("test"), run_id=run_id)
    blob, model = shipping.pack_task(task)
    rec = TrialRecord(id=f"{cfg.id}:{task.id}:0", run_id=run_id, config_id=cfg.id,
                      task_id=task.id, attempt=0, try_number=0)
    return ray_node.NodeJob(run_id=run_id, store_url=url, backend="local", config=cfg,
                            tasks=[model], records=[rec], lease_ttl_s=30.0,
                            renew_every_s=renew_every_s), blob


def test_a_node_runs_its_try_under_a_lease_and_returns_its_artifacts(
        tmp_path: Path, pg_url: str) -> None:
    task = load_suites([str(make_task(tmp_path / "suite", "quick"))]).tasks[0]
    store = Store.open(pg_url, runs_dir=tmp_path / "driver")
    job, blob = _job(store, pg_url, task, "r1", renew_every_s=0.2)
    result_json, artifacts = ray_node.run_job(job.model_dump_json(), blob)
    result = ray_node.NodeResult.model_validate_json(result_json)
    assert result.error is None and not result.fenced
    assert [r.status for r in result.records] == [TrialStatus.PASSED]
    stored = store.get_trial("r1", job.records[0].id, 0)
    assert stored is not None and stored.status is TrialStatus.PASSED
    assert stored.lease_owner == result.owner == f"{socket.gethostname()}:local:{os.getpid()}"
    shipping.unpack_dir(artifacts, store.run_dir("r1"))
    arts = store.artifacts("r1")
    assert arts and all((store.run_dir("r1") / a.relpath).is_file() for a in arts)


def test_a_node_stops_a_try_the_driver_closed_and_never_overwrites_the_verdict(
        tmp_path: Path, pg_url: str) -> None:
    """The driver thought the node dead and closed its try: the node's lease renewal is refused,
    it stops the try (its sandbox) instead of finishing it, and its writes are refused."""
    task = load_suites([str(make_task(tmp_path / "suite", "slow", solve="sleep 300",
                                      agent_timeout=600))]).tasks[0]
    store = Store.open(pg_url, runs_dir=tmp_path / "driver")
    job, blob = _job(store, pg_url, task, "r2", renew_every_s=0.2)
    trial_id = job.records[0].id
    out: list[tuple[str, bytes]] = []
    node = threading.Thread(target=lambda: out.append(ray_node.run_job(job.model_dump_json(), blob)))
    node.start()

    def running() -> bool:
        t = store.get_trial("r2", trial_id, 0)
        return t is not None and t.status is TrialStatus.RUNNING and t.lease_owner is not None

    assert eventually(running, timeout=300)
    closed = store.close_trials("r2", [trial_id], "node died: the driver lost it")
    assert [t.id for t in closed] == [trial_id]
    node.join(timeout=120)  # the solution sleeps 300 s: only the fence ends it sooner
    assert not node.is_alive(), "the node kept working on a try the driver closed"
    result = ray_node.NodeResult.model_validate_json(out[0][0])
    assert result.fenced == [trial_id]
    assert result.records[0].error == ray_node.FENCED
    stored = store.get_trial("r2", trial_id, 0)
    assert stored is not None and stored.status is TrialStatus.INFRA_INVALID
    assert stored.error == "node died: the driver lost it"


def test_the_node_probe_names_what_is_missing(tmp_path: Path, pg_url: str) -> None:
    ok = ray_node.NodeProbe.model_validate_json(ray_node.probe(
        "local", pg_url, ["scripted/solver"], ray_node.ModelFiles(), None))
    assert ok.problems == []
    bad = ray_node.NodeProbe.model_validate_json(ray_node.probe(
        "nosuch", "postgresql+psycopg://nobody@/none?host=/nonexistent", ["openai/gpt-4o"],
        ray_node.ModelFiles(), None))
    text = " | ".join(bad.problems)
    assert "nosuch sandboxes are not available" in text
    assert "store:" in text
    if "OPENAI_API_KEY" not in os.environ:
        assert "OPENAI_API_KEY" in text


@pytest.mark.parametrize("problem", ["sqlite", "unreachable", "auto"])
def test_ray_bad_input_is_one_line_before_anything_is_written(
        tmp_path: Path, pg_url: str, problem: str, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    from agentmeter.cli import app

    make_task(tmp_path / "suite", "ok")
    # a port nothing listens on: held bound (not listening) for the whole test, so connections
    # are refused and no other process can take it meanwhile
    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))
    port = refusing.getsockname()[1]
    request.addfinalizer(refusing.close)
    if problem == "sqlite":
        monkeypatch.delenv("AGENTMETER_DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("AGENTMETER_DATABASE_URL", pg_url)
    address = f"127.0.0.1:{port}"
    if problem == "auto":  # the address Ray itself would use
        monkeypatch.setenv("RAY_ADDRESS", address)
        address = "auto"
    res = CliRunner().invoke(app, ["run", "--suite", str(tmp_path / "suite"), "--store",
                                   str(tmp_path / "runs"), "--executor", "ray",
                                   "--ray-address", address])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert ("must be a PostgreSQL database" if problem == "sqlite"
            else f"no Ray cluster reachable at 127.0.0.1:{port}") in text, text
    store = Store.open(tmp_path / "runs") if problem == "sqlite" else Store.open(pg_url)
    assert store.list_runs() == []


def test_model_keys_are_the_nodes_with_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver without the provider's key may run a grid on nodes that have it (each node's
    probe checks its own environment); the local executor still needs the key here."""
    from agentmeter.runner.session import RunSetupError, make_request, prepare

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    grid = {"task_ids": ["access-log-summary"], "agents": ["native"], "models": ["openai/gpt-4o"]}
    with pytest.raises(RunSetupError, match="OPENAI_API_KEY"):
        prepare(make_request(**grid))
    prepared = prepare(make_request(**grid, executor="ray"))
    assert [c.record.model.name for c in prepared.configs] == ["openai/gpt-4o"]


def test_an_environment_that_does_not_build_is_a_build_error_not_a_retry(
        tmp_path: Path, pg_url: str) -> None:
    task = load_suites([str(make_task(tmp_path / "suite", "broken", dockerfile=(
        "FROM debian:trixie\nRUN echo no such luck >&2; exit 3\n")))]).tasks[0]
    store = Store.open(pg_url, runs_dir=tmp_path / "driver")
    job, blob = _job(store, pg_url, task, "r3", renew_every_s=5.0)
    result = ray_node.NodeResult.model_validate_json(ray_node.run_job(job.model_dump_json(), blob)[0])
    assert result.build_error is not None and "environment build failed" in result.build_error
    stored = store.get_trial("r3", job.records[0].id, 0)
    assert stored is not None and stored.status is TrialStatus.INFRA_INVALID
    assert stored.error == result.build_error


def test_a_killed_workers_scratch_directory_is_removed_by_the_next(tmp_path: Path) -> None:
    import subprocess
    import tempfile

    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = Path(tempfile.mkdtemp(prefix=f"{node_worker.SCRATCH_PREFIX}{dead.pid}-"))
    (gone / "runs").mkdir()
    mine = node_worker.new_scratch()
    try:
        node_worker.remove_stale_scratch()
        assert not gone.exists()
        assert mine.exists()  # a live worker's scratch stays
    finally:
        mine.rmdir()


def test_the_workers_event_loop_is_kept_and_a_job_leaves_nothing_on_it() -> None:
    """One loop per worker process between jobs; a job's leftover tasks, context variables and
    failure do not reach the next job; a job ending in a BaseException takes the loop with it."""
    import asyncio
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("job", default="clean")
    leftover_ran: list[str] = []

    async def messy() -> asyncio.AbstractEventLoop:
        var.set("dirty")

        async def leftover() -> None:
            await asyncio.sleep(0.2)
            leftover_ran.append("ran")  # cancelled with its job: never gets here

        asyncio.get_running_loop().create_task(leftover())
        return asyncio.get_running_loop()

    async def failing() -> None:
        raise ValueError("the job failed")

    async def look() -> tuple[asyncio.AbstractEventLoop, str, int]:
        await asyncio.sleep(0.3)  # the leftover would have finished by now
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return asyncio.get_running_loop(), var.get(), len(others)

    async def interrupted() -> None:
        raise KeyboardInterrupt

    first = node_worker.run_async(messy())
    with pytest.raises(ValueError):
        node_worker.run_async(failing())
    loop, seen, others = node_worker.run_async(look())
    assert loop is first and not loop.is_closed()  # kept, and not poisoned by the failure
    assert (seen, others, leftover_ran) == ("clean", 0, [])
    with pytest.raises(KeyboardInterrupt):
        node_worker.run_async(interrupted())
    assert loop.is_closed()
    fresh, _, _ = node_worker.run_async(look())
    assert fresh is not loop and not fresh.is_closed()


def test_a_finished_trys_scratch_is_removed_after_it_returns_and_before_the_worker_exits(
        tmp_path: Path) -> None:
    """The scratch directory is removed off the critical path; a worker exiting with removals
    still queued removes them first (here: each removal held back 0.3 s)."""
    import subprocess
    import sys

    code = (
        "import shutil, sys, time\n"
        "from agentmeter.runner import node_worker\n"
        "rm = shutil.rmtree\n"
        "node_worker.shutil.rmtree = lambda p, **k: (time.sleep(0.3), rm(p, **k))\n"
        "for _ in range(2):\n"
        "    d = node_worker.new_scratch()\n"
        "    (d / 'runs').mkdir(); (d / 'runs' / 'f').write_text('x')\n"
        "    node_worker.sweeper.discard(d)\n"
        "    print(d, flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(ray_node.__file__).parents[2]),
           "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout.split()
    assert len(out) == 2 and all(Path(d).parent == tmp_path for d in out)
    assert not any(Path(d).exists() for d in out), "the worker exited with its scratch left"
    mine = node_worker.new_scratch()
    (mine / "f").write_text("x")
    node_worker.sweeper.discard(mine)
    assert eventually(lambda: not mine.exists(), timeout=30)


def test_a_worker_parses_a_shipped_task_once_and_unpacks_it_again_if_its_cache_went(
        tmp_path: Path) -> None:
    import shutil

    task = load_suites([str(make_task(tmp_path / "suite", "cached"))]).tasks[0]
    blob, model = shipping.pack_task(task)
    cache = tmp_path / "node-cache"
    first = ray_node._shipped_task(blob, model, cache)
    assert ray_node._shipped_task(blob, model, cache) is first
    shutil.rmtree(cache)  # the node's cache was cleaned: the files are unpacked again
    again = ray_node._shipped_task(blob, model, cache)
    assert again == first and again.path.is_dir()
    assert (again.path / "task.toml").read_bytes() == (task.path / "task.toml").read_bytes()


def test_a_lease_is_measured_on_the_stores_clock_read_at_most_once_a_minute(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from datetime import UTC, datetime, timedelta

    skew = timedelta(hours=3)  # the database's clock is far from ours: its clock counts
    reads: list[datetime] = []

    class Clock:
        def clock(self) -> datetime:
            reads.append(datetime.now(UTC) + skew)
            return reads[-1]

    store = Clock()
    url = "postgresql://clock-test"
    monkeypatch.setattr(ray_node, "_clocks", {})
    first = ray_node._db_now(url, store)  # type: ignore[arg-type]
    time.sleep(0.05)
    second = ray_node._db_now(url, store)  # type: ignore[arg-type]
    assert len(reads) == 1  # carried forward, not read again
    assert timedelta(seconds=0.04) <= second - first <= timedelta(seconds=2)
    assert abs(second - (datetime.now(UTC) + skew)) < timedelta(seconds=2)
    monkeypatch.setattr(ray_node, "CLOCK_EVERY_S", 0.0)
    time.sleep(0.01)
    ray_node._db_now(url, store)  # type: ignore[arg-type]
    assert len(reads) == 2  # read again once the reading is older than CLOCK_EVERY_S


def test_packed_artifacts_keep_files_modes_and_links_without_a_header_per_member(
        tmp_path: Path) -> None:
    src = tmp_path / "scratch"
    (src / "trials" / "t").mkdir(parents=True)
    (src / "trials" / "t" / "run.sh").write_text("#!/bin/sh\n")
    (src / "trials" / "t" / "run.sh").chmod(0o755)
    (src / "trials" / "t" / "latest").symlink_to("run.sh")
    (src / "top.txt").write_text("x" * 700)
    blob = shipping.pack_dir(src)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["top.txt", "trials", "trials/t", "trials/t/latest",
                                         "trials/t/run.sh"]
    assert all(m.uid == m.gid == 0 and not m.pax_headers for m in members)
    dest = tmp_path / "run"
    shipping.unpack_dir(blob, dest)
    assert (dest / "top.txt").read_text() == "x" * 700
    assert (dest / "trials" / "t" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert os.readlink(dest / "trials" / "t" / "latest") == "run.sh"


def test_a_small_task_blob_travels_inside_its_tries_and_a_large_one_is_put_once() -> None:
    """Inline: no object to fetch and no dependency, so Ray hands a worker the next try on the
    lease it holds (tries with an object argument each have a scheduling key of their own)."""
    from agentmeter.runner import ray_executor

    put: list[int] = []

    def fake_put(blob: bytes) -> str:
        put.append(len(blob))
        return "ref"

    small = bytes(ray_executor.INLINE_BLOB_BYTES)
    assert ray_executor.task_argument(small, fake_put) is small and put == []
    assert ray_executor.task_argument(small + b"x", fake_put) == "ref"
    assert put == [ray_executor.INLINE_BLOB_BYTES + 1]

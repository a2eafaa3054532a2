"""The local backend against the Sandbox protocol: exec, files, snapshots, layers, limits."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from pathlib import Path

import pytest
from polling import eventually_async

from agentmeter.sandbox import layer_steps
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import ExposedSocket, LayerBuildError, LayerSpec, Limits, SandboxSpec


async def test_exec_basics(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec(env={"GREETING": "hi"}))
    try:
        assert isinstance(sb, Sandbox)
        r = await sb.exec("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
        r = await sb.exec(["cat"], stdin=b"from stdin")
        assert r.stdout == "from stdin"
        r = await sb.exec("pwd; echo $GREETING $EXTRA", cwd="/tmp", env={"EXTRA": "x"})
        assert r.stdout == "/tmp\nhi x\n"
        r = await sb.exec("id -u; id -g; echo $HOME", user="agent")
        assert r.stdout.split() == ["1000", "1000", "/home/agent"]
        r = await sb.exec("id -u", user="root")
        assert r.stdout.strip() == "0"
        # the agent user cannot write system files
        r = await sb.exec("echo x > /etc/passwd", user="agent")
        assert r.exit_code != 0
    finally:
        await sb.stop()


async def test_output_is_capped_with_marker(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        r = await sb.exec("head -c 100000 /dev/zero | tr '\\0' a", output_limit=1000)
        assert r.stdout_truncated
        assert "bytes truncated" in r.stdout
        assert r.stdout.startswith("a" * 500) and r.stdout.endswith("a" * 500)
    finally:
        await sb.stop()


async def test_timeout_kills_whole_tree_including_daemons(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        marker = f"am-daemon-{os.getpid()}-{time.time_ns()}"
        r = await sb.exec(f"(setsid bash -c 'exec -a {marker} sleep 300' &) ; sleep 60", timeout=1)
        assert r.timed_out
        assert await eventually_async(lambda: not any(marker.encode() in _cmdline(p) for p in _pids()))
        # the sandbox still works after a timeout
        assert (await sb.exec("echo alive")).stdout == "alive\n"
    finally:
        await sb.stop()


async def test_cancelled_exec_is_killed(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        marker = f"am-cancel-{time.time_ns()}"
        task = asyncio.create_task(sb.exec(f"exec -a {marker} sleep 300"))
        # cancelled once it runs (a fixed wait could cancel it before it started: nothing to kill)
        assert await eventually_async(lambda: any(marker.encode() in _cmdline(p) for p in _pids()))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await eventually_async(lambda: not any(marker.encode() in _cmdline(p) for p in _pids()))
    finally:
        await sb.stop()


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def test_files_copy_in_out(local_backend: LocalBackend, tmp_path: Path) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.write_file("/workspace/sub/a.bin", bytes(range(256)), mode=0o600)
        # root's 0600 file: read as root (the default user, the agent, may not)
        assert await sb.read_file("/workspace/sub/a.bin", user="root") == bytes(range(256))
        with pytest.raises(Exception, match="Permission denied"):
            await sb.read_file("/workspace/sub/a.bin")
        r = await sb.exec("stat -c %a /workspace/sub/a.bin")
        assert r.stdout.strip() == "600"
        src = tmp_path / "src"
        (src / "d").mkdir(parents=True)
        (src / "d" / "f.txt").write_text("F")
        (src / "top.txt").write_text("T")
        await sb.copy_in(src, "/workspace/in", user="agent")
        r = await sb.exec("cat /workspace/in/d/f.txt /workspace/in/top.txt; stat -c %u /workspace/in/top.txt")
        assert r.stdout == "FT1000\n"
        out = tmp_path / "out"
        await sb.copy_out("/workspace", out, user="root")
        assert (out / "in" / "d" / "f.txt").read_text() == "F"
        assert (out / "sub" / "a.bin").read_bytes() == bytes(range(256))
        with pytest.raises(Exception, match="read_file"):
            await sb.read_file("/workspace/missing")
        # a copy as root is root's, whoever owns it on the host (uid 1000 is the agent inside)
        owned = tmp_path / "owned.txt"
        owned.write_text("O")
        if os.geteuid() == 0:
            os.chown(owned, 1000, 1000)
        await sb.copy_in(owned, "/workspace/tests/owned.txt")
        r = await sb.exec("stat -c %u /workspace/tests/owned.txt; echo x >> /workspace/tests/owned.txt",
                          user="agent")
        assert r.stdout.split()[0] == "0" and r.exit_code != 0, r.stdout + r.stderr
        await sb.write_file("rel.txt", "R")  # a relative path is in the workdir, as on docker
        assert await sb.read_file("/workspace/rel.txt", user="root") == b"R"
    finally:
        await sb.stop()


def _plant_droppings(top: Path) -> None:
    """A tree with host bytecode caches beside its content (a.py, sub/c.txt)."""
    (top / "__pycache__").mkdir(parents=True)
    (top / "a.py").write_text("A = 1\n")
    (top / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (top / "sub").mkdir()
    (top / "sub" / "c.txt").write_text("C")
    (top / "sub" / "old.pyc").write_bytes(b"\x00")
    (top / "sub" / "old.pyo").write_bytes(b"\x00")


async def test_copy_in_leaves_host_bytecode_caches_out(local_backend: LocalBackend,
                                                       tmp_path: Path) -> None:
    src = tmp_path / "src"
    _plant_droppings(src)
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.copy_in(src, "/workspace/in", user="agent")
        r = await sb.exec("cd /workspace/in && find . -mindepth 1 | sort")
        assert r.stdout.split() == ["./a.py", "./sub", "./sub/c.txt"], r.stdout
    finally:
        await sb.stop()


def test_layer_cache_keys_ignore_host_bytecode_caches(tmp_path: Path) -> None:
    """A build context's key is its content's: the same on a host that imported its files."""
    ctx = tmp_path / "ctx"
    (ctx / "sub").mkdir(parents=True)
    (ctx / "a.py").write_text("A = 1\n")
    (ctx / "sub" / "c.txt").write_text("C")
    layer = LayerSpec(kind="script", source="true", context=ctx)
    before = (layer.recipe_digest(), layer_steps.tree_digest([ctx]))
    (ctx / "__pycache__").mkdir()
    (ctx / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (ctx / "sub" / "old.pyc").write_bytes(b"\x00")
    assert (layer.recipe_digest(), layer_steps.tree_digest([ctx])) == before
    (ctx / "sub" / "c.txt").write_text("changed")  # content still counts
    assert layer.recipe_digest() != before[0] and layer_steps.tree_digest([ctx]) != before[1]


def test_layer_cache_key_never_reads_through_a_context_link(tmp_path: Path) -> None:
    """Security review 2: a task's build context holding a link to a host file had the host
    read that file as root, whole into memory, for the layer's key (``big -> /swapfile``). The
    link counts as its target's text: the host file's content is never read."""
    ctx, host_file = tmp_path / "ctx", tmp_path / "host-secret"
    (ctx / "sub").mkdir(parents=True)
    host_file.write_text("one")
    (ctx / "sub" / "big").symlink_to(host_file)
    (ctx / "top").symlink_to(host_file)
    before = layer_steps.tree_digest([ctx])
    host_file.write_text("two")
    assert layer_steps.tree_digest([ctx]) == before
    (ctx / "sub" / "big").unlink()
    (ctx / "sub" / "big").symlink_to("elsewhere")  # the link itself still counts
    assert layer_steps.tree_digest([ctx]) != before


async def test_snapshot_and_diff(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.exec("mkdir -p keep && echo 1 > keep/a && echo 2 > b && echo 3 > gone && "
                      "echo h > .hidden && touch -d '2020-01-01' keep/a b gone")
        snap = await sb.snapshot()
        assert ".hidden" not in snap.entries
        await sb.exec("echo 22 > b; rm gone; echo new > keep/c; echo h2 > .hidden; chmod 600 keep/a")
        d = await sb.diff(snap)
        assert d.created == ["keep/c"]
        assert sorted(d.modified) == ["b", "keep/a"]
        assert d.deleted == ["gone"]
        d_all = await sb.diff(await sb.snapshot(ignore=()), ignore=())
        assert d_all.empty
    finally:
        await sb.stop()


async def test_same_size_same_second_rewrite_is_detected(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.exec("echo aaaa > f")
        snap = await sb.snapshot()
        # same size, and the mtime is restored: only the content digest can tell
        await sb.exec("t=$(stat -c %y f); echo bbbb > f; touch -d \"$t\" f")
        assert (await sb.diff(snap)).modified == ["f"]
    finally:
        await sb.stop()


DOCKERFILE = """\
FROM debian:trixie
ARG GREETING=hello
ENV APP_MODE=test
WORKDIR /app
COPY files/ /app/
RUN echo "$GREETING $APP_MODE" > /app/built.txt
"""


async def test_dockerfile_layers_cached_and_applied(local_backend: LocalBackend, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    (ctx / "files").mkdir(parents=True)
    (ctx / "files" / "data.txt").write_text(f"data {time.time_ns()}")
    layer = LayerSpec(kind="dockerfile", source=DOCKERFILE, origin=str(ctx / "Dockerfile"), context=ctx)
    spec = SandboxSpec(layers=(layer,))
    built: list[str] = []
    local_backend.layers.log = built.append
    try:
        await local_backend.prepare(spec)
        assert any("RUN" in b for b in built)
        built.clear()
        await local_backend.prepare(spec)
        assert built == []  # every step cached
    finally:
        local_backend.layers.log = None
    sb = await local_backend.start(spec)
    try:
        assert sb.workdir == "/app"
        r = await sb.exec("pwd; cat built.txt; cat data.txt; echo; echo $APP_MODE")
        assert r.stdout.splitlines()[:2] == ["/app", "hello test"]
        assert r.stdout.splitlines()[2].startswith("data ")
        assert r.stdout.splitlines()[3] == "test"
        # writes go to the sandbox's own upper dir, never to the cached layer
        await sb.exec("echo changed > built.txt")
    finally:
        await sb.stop()
    sb = await local_backend.start(spec)
    try:
        assert (await sb.exec("cat built.txt")).stdout == "hello test\n"
    finally:
        await sb.stop()


async def test_script_layer(local_backend: LocalBackend) -> None:
    script = f"mkdir -p /opt/tool && echo 'echo tool-{time.time_ns()}' > /opt/tool/run.sh"
    spec = SandboxSpec(layers=(LayerSpec(kind="script", source=script, network="none"),))
    sb = await local_backend.start(spec)
    try:
        r = await sb.exec("bash /opt/tool/run.sh", user="agent")
        assert r.stdout.startswith("tool-")
    finally:
        await sb.stop()


async def test_bad_dockerfiles(local_backend: LocalBackend, tmp_path: Path) -> None:
    ctx = tmp_path
    bad = LayerSpec(kind="dockerfile", source="FROM debian:trixie\nRUN true\nEXPOS 80\n",
                    origin="task/environment/Dockerfile", context=ctx)
    with pytest.raises(LayerBuildError, match=r"task/environment/Dockerfile:3: unknown .*EXPOS"):
        await local_backend.prepare(SandboxSpec(layers=(bad,)))
    marker = f"m{time.time_ns()}"
    failing = LayerSpec(kind="dockerfile", origin="x/Dockerfile", context=ctx,
                        source=f"FROM debian:trixie\nRUN echo {marker}-output && false\n")
    with pytest.raises(LayerBuildError) as ei:
        await local_backend.prepare(SandboxSpec(layers=(failing,)))
    msg = str(ei.value)
    assert "x/Dockerfile:2" in msg and f"echo {marker}-output && false" in msg
    assert f"{marker}-output" in msg.split("last output:")[1]
    # nothing was cached for the failed step (this process's own temporary layers: other test
    # workers and runs share the machine's layer cache and build theirs beside)
    leftovers = [p for p in local_backend.layers.dir.iterdir()
                 if p.name.startswith(".tmp") and p.name.endswith(f"-{os.getpid()}")]
    assert leftovers == []
    missing = LayerSpec(kind="dockerfile", origin="y/Dockerfile", context=ctx,
                        source="FROM debian:trixie\nCOPY nothere.txt /x\n")
    with pytest.raises(LayerBuildError, match="y/Dockerfile:2: COPY source nothere.txt not found"):
        await local_backend.prepare(SandboxSpec(layers=(missing,)))


async def test_exposed_unix_socket_reachable_inside(local_backend: LocalBackend, tmp_path: Path) -> None:
    sock_path = tmp_path / "svc.sock"

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        line = await r.readline()
        w.write(b"pong:" + line)
        await w.drain()
        w.close()

    server = await asyncio.start_unix_server(handle, path=str(sock_path))
    spec = SandboxSpec(exposed_sockets=(ExposedSocket(host_path=sock_path, port=18123),))
    sb = await local_backend.start(spec)
    try:
        r = await sb.exec("exec 3<>/dev/tcp/127.0.0.1/18123; echo ping >&3; cat <&3", user="agent",
                          timeout=10)
        assert r.stdout == "pong:ping\n"
    finally:
        await sb.stop()
        server.close()


async def test_no_network_by_default_and_opt_in(local_backend: LocalBackend) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        sb = await local_backend.start(SandboxSpec())
        try:
            r = await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout=10)
            assert r.exit_code != 0 and "connected" not in r.stdout
        finally:
            await sb.stop()
        # full network: a route out (pasta), but the host's loopback is still not the sandbox's
        # (reaching the outside: tests/test_hostile_network.py)
        sb = await local_backend.start(SandboxSpec(network="full"))
        try:
            r = await sb.exec(f"grep -c '^[a-z0-9]*\t00000000' /proc/net/route;"
                              f" exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout=10)
            assert r.stdout.splitlines()[0] == "1"  # a default route
            assert "connected" not in r.stdout
        finally:
            await sb.stop()
    finally:
        srv.close()


async def test_stop_cleans_up_and_is_idempotent(local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec(limits=Limits(memory_mb=256, pids=64)))
    directory = sb.dir
    await sb.exec("sleep 0.01")
    await sb.stop()
    await sb.stop()
    assert not directory.exists()
    assert not any(str(directory).encode() in Path(f"/proc/{p}/mountinfo").read_bytes()
                   for p in [os.getpid()])


async def test_cleanup_stale_removes_dead_owners(local_backend: LocalBackend, tmp_path: Path) -> None:
    """A runner killed with SIGKILL leaves its sandbox directory; the next start removes it."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import asyncio, os, sys\n"
        "from agentmeter.sandbox.local import LocalBackend\n"
        "from agentmeter.sandbox.spec import SandboxSpec\n"
        "async def main():\n"
        "    sb = await LocalBackend().start(SandboxSpec())\n"
        "    print(sb.dir, flush=True)\n"
        "    await asyncio.sleep(300)\n"
        "asyncio.run(main())\n")
    proc = await asyncio.create_subprocess_exec("python3", str(script), stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    directory = Path((await proc.stdout.readline()).decode().strip())
    assert directory.is_dir()
    proc.kill()
    await proc.wait()
    removed = await local_backend.cleanup_stale()
    assert removed >= 1
    assert not directory.exists()


async def test_cleanup_stale_attributes_directories_killed_before_owner_json(
        local_backend: LocalBackend) -> None:
    """A kill between creating the directory and recording its keeper leaves no owner.json;
    the owner's pid in the directory name still lets the next start remove it at once, while a
    directory of a live owner (this process) is left alone."""
    from agentmeter.paths import cache_dir
    child = await asyncio.create_subprocess_exec("true")  # a pid that has just exited
    await child.wait()
    top = cache_dir() / "sandboxes"
    orphan = top / f"{child.pid}-deadbeef0001"
    mine = top / f"{os.getpid()}-deadbeef0002"
    for d in (orphan, mine):
        (d / "rw" / "upper").mkdir(parents=True)
    try:
        await local_backend.cleanup_stale()
        assert not orphan.exists()
        assert mine.is_dir()
    finally:
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(orphan, ignore_errors=True)


async def test_cleanup_stale_tells_a_reused_pid_from_the_owner(local_backend: LocalBackend) -> None:
    """owner.json names the owner and keeper by pid and start time: a pid that another process
    has taken since (pid_max is small) neither keeps a dead owner's directory nor is killed as
    its keeper."""
    import json

    from agentmeter.paths import cache_dir
    bystander = await asyncio.create_subprocess_exec("sleep", "30")
    d = cache_dir() / "sandboxes" / f"{bystander.pid}-deadbeef0003"
    (d / "rw" / "upper").mkdir(parents=True)
    (d / "owner.json").write_text(json.dumps({"owner": bystander.pid, "keeper": bystander.pid,
                                              "owner_start": "1", "keeper_start": "1"}))
    try:
        await local_backend.cleanup_stale()
        assert not d.exists()  # its owner (started at tick 1) is gone
        assert bystander.returncode is None and Path(f"/proc/{bystander.pid}").exists()
    finally:
        bystander.kill()
        await bystander.wait()
        shutil.rmtree(d, ignore_errors=True)


async def test_failed_start_leaves_nothing_behind(local_backend: LocalBackend, tmp_path: Path) -> None:
    from agentmeter.paths import cache_dir
    from agentmeter.sandbox.spec import Mount, SandboxError

    def ours() -> set[Path]:
        """This process's sandbox directories (named by their owner's pid): other processes
        (xdist workers, runners other tests start) make and remove theirs meanwhile."""
        top = cache_dir() / "sandboxes"
        return {d for d in top.iterdir() if d.name.startswith(f"{os.getpid()}-")} \
            if top.is_dir() else set()

    before = ours()
    with pytest.raises(SandboxError, match="does not exist"):
        await local_backend.start(SandboxSpec(mounts=(Mount(source=tmp_path / "nope", target="/x"),)))
    # a mount target bwrap cannot create (below a file) fails at the first exec
    (tmp_path / "f").write_text("x")
    with pytest.raises(SandboxError, match="failed to start"):
        await local_backend.start(
            SandboxSpec(mounts=(Mount(source=tmp_path / "f", target="/etc/hostname/x"),)))
    assert ours() <= before  # nothing new left behind


def test_unbuildable_base_fails_clearly_and_leaves_nothing(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """debootstrap against a mirror that does not answer: one clear error with its last lines,
    no half-built base left to be mistaken for a good one."""
    from agentmeter.sandbox import rootfs
    from agentmeter.sandbox.spec import SandboxError
    if os.geteuid() != 0:
        pytest.skip("building the Debian base needs root")
    monkeypatch.setenv("AGENTMETER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENTMETER_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")  # discard port
    with pytest.raises(SandboxError, match="debootstrap failed building the Debian base") as err:
        rootfs.ensure_debian_base(None)
    assert "Failed getting release file" in str(err.value)  # debootstrap's own last lines
    bases = tmp_path / "home" / "bases"
    assert not (rootfs.debian_base_path().parent / "base.json").exists()
    assert not [p for p in bases.iterdir() if p.name.startswith(".build-")]


async def test_ports_below_1024_can_be_bound_in_a_private_network(local_backend: LocalBackend) -> None:
    """A task's server on port 80 works in its sandbox's own network namespace (as in Docker),
    although that namespace is not the sandbox root's to configure."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs the host's /usr/bin/python3 (host base)")
    sb = await local_backend.start(SandboxSpec(base="host", network="none"))
    try:
        bind = "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 80)); print('bound')\""
        for user in ("root", "agent"):
            r = await sb.exec(bind, user=user)
            assert r.stdout == "bound\n", (user, r.stderr)
    finally:
        await sb.stop()

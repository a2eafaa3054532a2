"""The docker sandbox backend against a real dockerd (started by the session when none runs)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from aiohttp import web
from notices_capture import captured_notices

from agentmeter.sandbox.docker import DockerBackend  # noqa: E402
from agentmeter.sandbox.dockercli import LABEL, OWNER_LABEL  # noqa: E402
from agentmeter.sandbox.dockerimage import BASE_TAG, base_digest, chain_digest, layer_tag  # noqa: E402
from agentmeter.sandbox.dockerkill import KILL_MARKED  # noqa: E402
from agentmeter.sandbox.dockersandbox import DockerSandbox  # noqa: E402
from agentmeter.sandbox.images import adapt_digest, image_digest  # noqa: E402
from agentmeter.sandbox.protocol import Sandbox  # noqa: E402
from agentmeter.sandbox.spec import (  # noqa: E402
    ExposedSocket,
    LayerBuildError,
    LayerSpec,
    Limits,
    SandboxSpec,
)

pytestmark = pytest.mark.docker


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def _image_exists(tag: str) -> bool:
    return _docker("image", "inspect", tag).returncode == 0


def _nonce() -> str:
    return uuid.uuid4().hex[:10]


async def _processes(box: DockerSandbox) -> str:
    r = await box.exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo;"
                       " done")
    return r.stdout


@pytest.fixture
async def box(docker_backend: DockerBackend):  # type: ignore[no-untyped-def]
    sb = await docker_backend.start(SandboxSpec())
    yield sb
    await sb.stop()


async def test_exec_basics(box: DockerSandbox) -> None:
    assert isinstance(box, Sandbox)
    r = await box.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    assert box.workdir == "/workspace"
    assert (await box.exec("pwd")).stdout == "/workspace\n"
    assert (await box.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
    assert (await box.exec("cat", stdin=b"fed via stdin")).stdout == "fed via stdin"
    assert (await box.exec("echo $FOO", env={"FOO": "bar baz"})).stdout == "bar baz\n"
    assert (await box.exec(["printf", "%s|", "a b", "c"])).stdout == "a b|c|"
    agent = await box.exec("id -u; id -g; echo $HOME; echo $USER", user="agent")
    assert agent.stdout.split() == ["1000", "1000", "/home/agent", "agent"]
    assert (await box.exec("id -u")).stdout == "0\n"  # the default user is root
    seen: list[bytes] = []
    await box.exec("echo streamed", on_stdout=seen.append)
    assert b"".join(seen) == b"streamed\n"


async def test_output_is_capped_with_a_marker(box: DockerSandbox) -> None:
    r = await box.exec("head -c 100000 /dev/zero | tr '\\0' x; echo END", output_limit=1000)
    assert r.stdout_truncated and not r.stderr_truncated
    assert "bytes truncated" in r.stdout and r.stdout.endswith("END\n")
    assert len(r.stdout) < 1200


async def test_timeout_kills_daemonized_children_only_of_that_exec(box: DockerSandbox) -> None:
    sibling = asyncio.create_task(box.exec("sleep 999"))
    agent_sibling = asyncio.create_task(box.exec("sleep 998", user="agent"))
    r = await box.exec("setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo started; sleep 1001",
                       timeout=2)
    assert r.timed_out and not r.ok and r.stdout == "started\n"
    r2 = await box.exec("setsid sleep 1002 >/dev/null 2>&1 < /dev/null & sleep 1003", timeout=2,
                        user="agent")
    assert r2.timed_out
    procs = await _processes(box)
    for gone in ("sleep 1000", "sleep 1001", "sleep 1002", "sleep 1003"):
        assert gone not in procs
    assert "sleep 999" in procs and "sleep 998" in procs  # other execs keep running
    # cancelling an exec kills its processes too
    sibling.cancel()
    agent_sibling.cancel()
    for t in (sibling, agent_sibling):
        with pytest.raises(asyncio.CancelledError):
            await t
    procs = await _processes(box)
    assert "sleep 999" not in procs and "sleep 998" not in procs


async def test_in_container_sweep_kills_marked_processes_without_forking(
        box: DockerSandbox) -> None:
    # the sweep used when the host cannot see the container's processes (not root, remote daemon)
    for user, n in (("root", 1111), ("agent", 2222)):
        await box.exec(f"AGENTMETER_EXEC=m{n} setsid sleep {n} >/dev/null 2>&1 < /dev/null &"
                       f" sleep 300 >/dev/null 2>&1 < /dev/null &", user=user)
    for user in ("0:0", "1000:1000"):
        for marker in ("AGENTMETER_EXEC=m1111", "AGENTMETER_EXEC=m2222"):
            r = _docker("exec", "-u", user, box.id, "bash", "-c", KILL_MARKED, "kill", marker)
            assert r.returncode == 0, r.stderr
    procs = await _processes(box)
    assert "sleep 1111" not in procs and "sleep 2222" not in procs
    assert procs.count("sleep 300") == 2  # unmarked processes live on


def _docker_bridge_gateway() -> str | None:
    r = _docker("network", "inspect", "bridge", "-f", "{{(index .IPAM.Config 0).Gateway}}")
    return r.stdout.strip() or None if r.returncode == 0 else None


async def test_network_none_cannot_reach_the_host(docker_backend: DockerBackend) -> None:
    gateway = _docker_bridge_gateway()
    if gateway is None:
        pytest.skip("dockerd runs without the default bridge network")
    hits: list[bytes] = []

    async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        hits.append(await r.read(100))
        w.close()

    server = await asyncio.start_server(on_conn, gateway, 0)
    port = server.sockets[0].getsockname()[1]
    probe = f"timeout 5 bash -c 'echo hello > /dev/tcp/{gateway}/{port}'"
    try:
        none = await docker_backend.start(SandboxSpec())
        full = await docker_backend.start(SandboxSpec(network="full"))
        try:
            assert (await none.exec("ls /sys/class/net")).stdout.split() == ["lo"]
            assert (await none.exec(probe)).exit_code != 0
            # a full network reaches docker0's address, and the fence (ip rule prohibit,
            # issue 24) refuses it there too: the kernel's answer, not a broken probe
            fenced = await full.exec(probe)
            assert fenced.exit_code != 0 and "Permission denied" in fenced.stderr, fenced
        finally:
            await none.stop()
            await full.stop()
    finally:
        server.close()
        await server.wait_closed()
    assert hits == []


async def test_exposed_socket_reaches_a_host_unix_socket(docker_backend: DockerBackend,
                                                         tmp_path: Path) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello from the host, path={request.path}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = tmp_path / "gw.sock"
    await web.UnixSite(runner, str(sock)).start()
    try:
        sb = await docker_backend.start(
            SandboxSpec(exposed_sockets=(ExposedSocket(host_path=sock, port=8123),)))
        try:
            r = await sb.exec("exec 3<>/dev/tcp/127.0.0.1/8123; "
                              "printf 'GET /v1/models HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3;"
                              " cat <&3",
                              user="agent", timeout=20)
        finally:
            await sb.stop()
    finally:
        await runner.cleanup()
    assert r.exit_code == 0, r.stderr
    assert "200 OK" in r.stdout and "hello from the host, path=/v1/models" in r.stdout


async def test_snapshot_and_diff(box: DockerSandbox) -> None:
    await box.exec("mkdir -p src && echo one > src/a.txt && echo two > b.txt && echo gone > c.txt"
                   " && echo hidden > .hidden")
    snap = await box.snapshot()
    assert {"src", "src/a.txt", "b.txt", "c.txt"} <= snap.entries.keys()
    assert ".hidden" not in snap.entries
    # same size, written within the same second: only the content digest can tell
    await box.exec("echo ONE > src/a.txt; touch -d @0 b.txt; rm c.txt; echo new > src/d.txt;"
                   " echo x > .hidden")
    d = await box.diff(snap)
    assert d.created == ["src/d.txt"]
    assert d.modified == ["b.txt", "src/a.txt"]
    assert d.deleted == ["c.txt"]
    assert (await box.diff(await box.snapshot())).empty


async def test_files_in_and_out(box: DockerSandbox, tmp_path: Path) -> None:
    await box.write_file("notes/a.txt", "hi\n", user="agent", mode=0o600)
    assert await box.read_file("/workspace/notes/a.txt") == b"hi\n"
    assert (await box.exec("stat -c '%u %a' notes/a.txt")).stdout == "1000 600\n"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.bin").write_bytes(bytes(range(256)))
    await box.copy_in(src, "/work/in", user="agent")
    assert (await box.exec("stat -c '%u' /work/in/sub/f.bin")).stdout == "1000\n"
    assert await box.read_file("/work/in/sub/f.bin") == bytes(range(256))
    await box.exec("mkdir -p out/d && echo data > out/d/f && ln -s /etc/passwd out/abs"
                   " && ln -s ../../../../../../etc/passwd out/up && ln -s d/f out/ok")
    dst = tmp_path / "copied"
    await box.copy_out("out", dst)
    assert (dst / "d" / "f").read_text() == "data\n"
    assert (dst / "ok").is_symlink() and (dst / "ok").read_text() == "data\n"
    assert not (dst / "abs").exists() and not (dst / "abs").is_symlink()
    assert not (dst / "up").exists() and not (dst / "up").is_symlink()
    await box.copy_out("out/d/f", tmp_path / "single")
    assert (tmp_path / "single" / "f").read_text() == "data\n"


async def test_host_bytecode_caches_stay_out_of_copies_and_build_contexts(
        docker_backend: DockerBackend, tmp_path: Path) -> None:
    """copy_in and a script layer's build context leave __pycache__/*.pyc of the host out."""
    src = tmp_path / "src"
    (src / "__pycache__").mkdir(parents=True)
    (src / "a.py").write_text("A = 1\n")
    (src / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (src / "sub").mkdir()
    (src / "sub" / "c.txt").write_text("C")
    (src / "sub" / "old.pyc").write_bytes(b"\x00")
    layer = LayerSpec(kind="script", origin="setup.sh", context=src,
                      source=f"# {_nonce()}\nfind . -mindepth 1 | sort > /opt/context-listing\n")
    sb = await docker_backend.start(SandboxSpec(layers=(layer,)))
    try:
        want = ["./a.py", "./sub", "./sub/c.txt"]
        assert (await sb.read_file("/opt/context-listing")).decode().split() == want
        await sb.copy_in(src, "/work/in", user="agent")
        r = await sb.exec("cd /work/in && find . -mindepth 1 | sort")
        assert r.stdout.split() == want, r.stdout
    finally:
        await sb.stop()
        _docker("rmi", layer_tag(chain_digest(base_digest(), layer)))  # a one-off image


async def test_dockerfile_layer_builds_once_and_sets_defaults(docker_backend: DockerBackend,
                                                              tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "hello.txt").write_text("from the context\n")
    nonce = _nonce()
    dockerfile = LayerSpec(kind="dockerfile", origin="tasks/demo/Dockerfile", context=ctx, source=(
        f"FROM python:3.13-slim\nENV GREETING=hi NONCE={nonce}\nWORKDIR /app\n"
        "COPY hello.txt /app/hello.txt\nRUN echo built > /app/built.txt && chown -R 1000 /app\n"
        "USER 1000\n"))
    script = LayerSpec(kind="script", origin="setup.sh",
                       source=f"# {nonce}\nid -u > /root/script-ran-as\necho done > /opt/marker\n")
    spec = SandboxSpec(layers=(dockerfile, script), env={"EXTRA": "1"})
    t0 = time.monotonic()
    with captured_notices() as said:
        await docker_backend.prepare(spec)
    first = time.monotonic() - t0
    first_said = list(said)
    pulled = not said  # where a registry serves python:3.13-slim, the image itself is used
    assert pulled or "FROM python:3.13-slim" in said[0]
    root = image_digest(_docker("image", "inspect", "-f", "{{.Id}}", "python:3.13-slim").stdout.strip()) \
        if pulled else base_digest()
    tag = layer_tag(chain_digest(adapt_digest(chain_digest(root, dockerfile)), script))
    image_id = _docker("image", "inspect", "-f", "{{.Id}}", tag).stdout
    assert image_id

    t0 = time.monotonic()
    with captured_notices() as said:
        await DockerBackend().prepare(spec)  # fresh backend: only the image tags are cached
    second = time.monotonic() - t0
    # the FROM image is looked up again (a new backend is a new run: its task is told once
    # more), but nothing is built or parsed for a build: no other notice
    assert said == first_said
    assert _docker("image", "inspect", "-f", "{{.Id}}", tag).stdout == image_id
    print(f"\nlayer build: first prepare {first:.2f}s, cached prepare {second:.3f}s")

    sb = await docker_backend.start(spec)
    try:
        r = await sb.exec("pwd; id -u; echo $GREETING $EXTRA; cat hello.txt built.txt /opt/marker")
        assert r.stdout.splitlines() == ["/app", "1000", "hi 1", "from the context", "built",
                                         "done"]
        assert (await sb.exec("cat /root/script-ran-as", user="root")).stdout == "0\n"
    finally:
        await sb.stop()
    # an explicit spec.workdir/user wins over the image's
    sb = await docker_backend.start(spec.model_copy(update={"workdir": "/tmp", "user": "root"}))
    try:
        assert (await sb.exec("pwd; id -u")).stdout == "/tmp\n0\n"
    finally:
        await sb.stop()
        _docker("rmi", tag, layer_tag(chain_digest(base_digest(), dockerfile)))  # one-off images


async def test_unknown_instruction_names_file_and_line(docker_backend: DockerBackend) -> None:
    layer = LayerSpec(kind="dockerfile", origin="tasks/x/Dockerfile",
                      source="FROM debian:trixie\nRUN true\nEXPOS 80\n")
    with pytest.raises(LayerBuildError, match=r"tasks/x/Dockerfile:3: unknown .*EXPOS"):
        await docker_backend.prepare(SandboxSpec(layers=(layer,)))


async def test_failing_run_shows_command_and_output_and_tags_nothing(
        docker_backend: DockerBackend) -> None:
    nonce = _nonce()
    layer = LayerSpec(kind="dockerfile", origin="tasks/y/Dockerfile", source=(
        f"FROM debian:13\nRUN echo fine-{nonce}\n"
        f"RUN echo about-to-fail-{nonce} && \\\n    exit 7\n"))
    with pytest.raises(LayerBuildError) as e:
        await docker_backend.prepare(SandboxSpec(layers=(layer,)))
    msg = str(e.value)
    assert f"tasks/y/Dockerfile:3: RUN echo about-to-fail-{nonce} && exit 7" in msg
    assert f"| about-to-fail-{nonce}" in msg and "non-zero code: 7" in msg
    assert not _image_exists(layer_tag(chain_digest(base_digest(), layer)))

    script = LayerSpec(kind="script", origin="tasks/y/setup.sh",
                       source=f"echo step-one-{nonce}\nfalse --flag\necho never\n")
    with pytest.raises(LayerBuildError) as e:
        await docker_backend.prepare(SandboxSpec(layers=(script,)))
    msg = str(e.value)
    assert "tasks/y/setup.sh:2: false --flag" in msg and f"| step-one-{nonce}" in msg
    assert "never" not in msg
    assert not _image_exists(layer_tag(chain_digest(base_digest(), script)))


async def test_memory_limit_kills_a_big_allocation(docker_backend: DockerBackend) -> None:
    sb = await docker_backend.start(SandboxSpec(limits=Limits(memory_mb=64)))
    try:
        r = await sb.exec("head -c 1G /dev/zero | tail > /dev/null", timeout=60)
        assert not r.timed_out and r.exit_code == 137  # tail was SIGKILLed by the OOM killer
        assert (await sb.exec("head -c 10M /dev/zero | tail > /dev/null")).exit_code == 0
    finally:
        await sb.stop()


async def test_pids_limit_contains_a_fork_flood(docker_backend: DockerBackend) -> None:
    sb = await docker_backend.start(SandboxSpec(limits=Limits(pids=24)))
    try:
        r = await sb.exec("for i in $(seq 100); do sleep 300 >/dev/null 2>&1 & done;"
                          " echo all-forked", timeout=4)
        assert "Resource temporarily unavailable" in r.stderr
        assert "all-forked" not in r.stdout
        assert (await sb.exec("true")).ok  # room again once the flood was killed
    finally:
        await sb.stop()


async def test_disk_limit_is_enforced_or_warned_about(docker_backend: DockerBackend) -> None:
    fresh = DockerBackend()  # the notice comes once per backend: the shared one may have given it
    with captured_notices() as said:
        sb = await fresh.start(SandboxSpec(limits=Limits(disk_mb=100)))
    try:
        if not any("storage-opt" in s for s in said):
            size_mb = int((await sb.exec("df -m --output=size / | tail -1")).stdout)
            assert size_mb <= 110
        assert (await sb.exec("true")).ok
    finally:
        await sb.stop()


async def test_stop_removes_the_container(docker_backend: DockerBackend) -> None:
    sb = await docker_backend.start(SandboxSpec(hostname="box1"))
    assert (await sb.exec("hostname")).stdout == "box1\n"
    assert _docker("inspect", sb.id).returncode == 0
    await sb.stop()
    assert _docker("inspect", sb.id).returncode != 0
    await sb.stop()  # idempotent


async def test_cleanup_stale_removes_containers_of_dead_owners(
        docker_backend: DockerBackend) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = f"{os.uname().nodename}:{dead.pid}:1"
    name = f"agentmeter-stale-{_nonce()}"
    r = _docker("run", "-d", "--name", name, "--label", f"{LABEL}=1",
                "--label", f"{OWNER_LABEL}={owner}", "--network", "none", BASE_TAG, "sleep", "300")
    assert r.returncode == 0, r.stderr
    alive = await docker_backend.start(SandboxSpec())
    try:
        assert await docker_backend.cleanup_stale() >= 1
        assert _docker("inspect", name).returncode != 0
        assert _docker("inspect", alive.id).returncode == 0  # ours is alive
    finally:
        await alive.stop()


async def test_the_base_is_owned_by_in_container_ids(box: DockerSandbox) -> None:
    """The docker base is the local one with its shifted owners (idmap.py) mapped back: the
    agent owns its home, root owns the system (no host uid 2**30+ leaks into an image)."""
    r = await box.exec("stat -c '%u %n' /home/agent /etc/passwd /usr/bin; mkdir ~/.x && echo ok",
                       user="agent")
    assert r.stdout.split("\n")[:4] == ["1000 /home/agent", "0 /etc/passwd", "0 /usr/bin", "ok"], \
        r.stdout + r.stderr

"""Sandbox networks through the harness's proxy (sandbox/proxy.py, netsetup.py) on real
sandboxes of both backends: allowlists, the host's loopback out of reach, malformed requests,
the package cache (a local HTTP server stands in for the package hosts and counts what reaches
it), pip/apt giving up at once without network, and the trial's network and status message."""

from __future__ import annotations

import asyncio
import hashlib
import io
import secrets
import socket
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.hostpolicy import HostPolicy
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.pkgcache import PackageCache
from agentmeter.sandbox.protocol import Sandbox, SandboxBackend
from agentmeter.sandbox.proxy import PROXY_PORT, REFUSED_REASON, SandboxProxy
from agentmeter.sandbox.spec import LayerSpec, SandboxSpec
from agentmeter.store.db import Store

#: pip, curl and apt in the sandbox (a cached layer built with network)
TOOLS = LayerSpec(kind="script", label="nettools", source=(
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl "
    "python3-pip >/dev/null"))
#: one raw request to the proxy from inside, with bash alone; prints the answer
ASK = r'exec 3<>/dev/tcp/127.0.0.1/$PROXY || exit 9; printf "$1" >&3; timeout 20 cat <&3'


class Upstream:
    """A stand-in for the package hosts on the host's 127.0.0.1: serves ``files``, counts hits."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: list[str] = []
        up = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                up.hits.append(self.path)
                body = up.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                body = body if body is not None else b"nope"
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hits_under(self, prefix: str) -> list[str]:
        return [h for h in self.hits if h.startswith(prefix)]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.server.shutdown()
    up.server.server_close()


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    if request.param == "local":
        return LocalBackend()
    return request.getfixturevalue("docker_backend")  # type: ignore[no-any-return]


def _get(url: str, method: str = "GET") -> str:
    host = url.split("/")[2]
    return f"{method} {url} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n"


async def _ask(sb: Sandbox, request: str) -> str:
    r = await sb.exec(["bash", "-c", ASK, "ask", request], env={"PROXY": str(PROXY_PORT)},
                      user="agent", timeout=60)
    return r.stdout


async def test_allowlist_admits_listed_hosts_only(backend: SandboxBackend, upstream: Upstream) -> None:
    other = Upstream()  # a host service that is not listed
    other.files["/secret"] = upstream.files["/ok"] = b"hello"
    listed = f"127.0.0.1:{upstream.port}"
    sb = await backend.start(SandboxSpec(network="allowlist", allowed_hosts=(listed,),
                                         allow_host_network=True, net_extras=True))
    try:
        assert "hello" in await _ask(sb, _get(f"http://{listed}/ok"))
        for req in (_get(f"http://127.0.0.1:{other.port}/secret"),
                    _get(f"http://localhost:{upstream.port}/ok"),  # listed by address only
                    _get("http://example.com/"),
                    f"CONNECT 127.0.0.1:{other.port} HTTP/1.1\\r\\n\\r\\n",
                    "CONNECT example.com:443 HTTP/1.1\\r\\n\\r\\n"):
            got = await _ask(sb, req)
            assert got.startswith(f"HTTP/1.1 403 {REFUSED_REASON}"), (req, got)
        # no way around the proxy: the sandbox has no other network
        r = await sb.exec(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{other.port} && cat <&3"],
                          timeout=30)
        assert "hello" not in r.stdout and r.exit_code != 0
        env = (await sb.exec("env", user="agent")).stdout
        assert f"http_proxy=http://127.0.0.1:{PROXY_PORT}" in env and "PIP_INDEX_URL=" in env
    finally:
        await sb.stop()
        other.server.shutdown()
        other.server.server_close()
    assert other.hits == [] and upstream.hits == ["/ok"]


async def test_public_mode_keeps_the_hosts_loopback_out(backend: SandboxBackend,
                                                        upstream: Upstream) -> None:
    upstream.files["/secret"] = b"host-only"
    sb = await backend.start(SandboxSpec(network="full", net_extras=True))
    try:
        for host in ("127.0.0.1", "localhost"):
            got = await _ask(sb, _get(f"http://{host}:{upstream.port}/secret"))
            assert got.startswith("HTTP/1.1 403"), got
        got = await _ask(sb, f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\\r\\n\\r\\n")
        assert got.startswith("HTTP/1.1 403"), got
    finally:
        await sb.stop()
    assert upstream.hits == []


async def test_malformed_requests_get_400_and_the_proxy_lives_on(tmp_path: Path,
                                                                 upstream: Upstream) -> None:
    upstream.files["/fine"] = b"still serving"
    proxy = SandboxProxy(HostPolicy([f"127.0.0.1:{upstream.port}"], host_network=True),
                         socket_path=tmp_path / "p.sock")
    await proxy.start()

    async def send(data: bytes, whole: bool = False) -> bytes:
        """The first bytes of the answer, or (``whole``) all of it up to the proxy's close:
        headers and body may come in separate reads."""
        r, w = await asyncio.open_unix_connection(str(tmp_path / "p.sock"))
        w.write(data)
        await w.drain()
        got = await asyncio.wait_for(r.read() if whole else r.read(4096), 30)
        w.close()
        return got

    try:
        for bad in (b"\x00\xff garbage\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9\r\n\r\n",
                    b"CONNECT nohost HTTP/1.1\r\n\r\n", b"GET https://x.org/ HTTP/1.1\r\n\r\n",
                    b"GET http://x.org:99999/ HTTP/1.1\r\n\r\n",
                    b"GET http://x.org/ HTTP/1.1\r\nbad header\r\n\r\n",
                    b"GET http://x.org/ HTTP/1.1\r\nX: " + b"a" * (80 << 10) + b"\r\n\r\n"):
            got = await send(bad)
            assert got.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431")), (bad[:40], got[:80])
        r, w = await asyncio.open_unix_connection(str(tmp_path / "p.sock"))
        w.close()  # a client that leaves at once
        got = await send(f"GET http://127.0.0.1:{upstream.port}/fine HTTP/1.1\r\n"
                         "Connection: close\r\n\r\n".encode(), whole=True)
        assert got.split(b" ", 2)[1] == b"200" and got.endswith(b"still serving"), got
    finally:
        await proxy.stop()


async def test_apt_files_come_from_the_cache_the_second_time(backend: SandboxBackend,
                                                            upstream: Upstream) -> None:
    run = f"/{secrets.token_hex(4)}"  # fresh cache keys for this test run
    upstream.files[f"{run}/debian/dists/trixie/InRelease"] = b"index"
    upstream.files[f"{run}/debian/pool/main/h/hello_1_all.deb"] = b"x" * 200_000
    upstream.files[f"{run}/debian/other.txt"] = b"uncached"
    base = f"http://127.0.0.1:{upstream.port}{run}/debian"
    spec = SandboxSpec(network="allowlist", allowed_hosts=(f"127.0.0.1:{upstream.port}",),
                       allow_host_network=True, net_extras=True)
    for trial in range(2):
        sb = await backend.start(spec)
        try:
            for path in ("dists/trixie/InRelease", "pool/main/h/hello_1_all.deb", "other.txt"):
                got = await _ask(sb, _get(f"{base}/{path}"))
                assert got.split(" ", 2)[1] == "200", got[:200]
        finally:
            await sb.stop()
        if trial == 0:
            assert len(upstream.hits_under(run)) == 3
    # the second trial: the index and the .deb from the cache, the other file upstream again
    assert upstream.hits_under(run)[3:] == [f"{run}/debian/other.txt"]


def _wheel(name: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{name}-1.0.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(f"{name}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return buf.getvalue()


async def test_pip_through_the_mirror_downloads_once(backend: SandboxBackend, upstream: Upstream,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = f"/{secrets.token_hex(4)}"
    name = f"demo{secrets.token_hex(3)}"
    wheel = _wheel(name)
    digest = hashlib.sha256(wheel).hexdigest()
    whl = f"{run}/files/{name}-1.0-py3-none-any.whl"
    upstream.files[whl] = wheel
    upstream.files[f"{run}/simple/{name}/"] = (
        f'<html><body><a href="http://127.0.0.1:{upstream.port}{whl}#sha256={digest}">'
        f'{name}-1.0-py3-none-any.whl</a></body></html>').encode()
    monkeypatch.setenv("AGENTMETER_PYPI_INDEX", f"http://127.0.0.1:{upstream.port}{run}/simple/")
    spec = SandboxSpec(network="allowlist", allowed_hosts=(f"127.0.0.1:{upstream.port}",),
                       allow_host_network=True, layers=(TOOLS,), net_extras=True)
    for trial in range(2):
        sb = await backend.start(spec)
        try:
            r = await sb.exec(f"pip download --no-deps -d /tmp/d {name} && sha256sum /tmp/d/*",
                              user="agent", timeout=120)
            assert r.exit_code == 0 and digest in r.stdout, r.stdout + r.stderr
        finally:
            await sb.stop()
        if trial == 0:
            assert sorted(upstream.hits_under(run)) == sorted([f"{run}/simple/{name}/", whl])
    assert len(upstream.hits_under(run)) == 2  # the second trial: nothing upstream


async def test_a_download_that_fails_its_hash_is_not_kept(tmp_path: Path, upstream: Upstream) -> None:
    upstream.files["/f.whl"] = b"tampered"
    proxy = SandboxProxy(HostPolicy([f"127.0.0.1:{upstream.port}"], host_network=True))
    cache = PackageCache(tmp_path)
    url = f"http://127.0.0.1:{upstream.port}/f.whl"
    with pytest.raises(Exception, match="sha256"):
        await cache.get(url, "immutable", proxy.open, sha256="0" * 64)
    assert cache.lookup(url) is None
    assert (await cache.get(url, "immutable", proxy.open, sha256=hashlib.sha256(
        b"tampered").hexdigest())) == cache.lookup(url)
    assert len(upstream.hits) == 2


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _pypi_reachable(), reason="PyPI is not reachable from this host")
async def test_real_pip_download_through_the_mirror() -> None:
    backend = LocalBackend()
    for _ in range(2):
        sb = await backend.start(SandboxSpec(network="full", layers=(TOOLS,), net_extras=True))
        try:
            r = await sb.exec("pip download --no-deps -d /tmp/d six", user="agent", timeout=120)
        finally:
            await sb.stop()
        assert r.exit_code == 0 and "/pypi/files/https/files.pythonhosted.org/" in r.stdout, \
            r.stdout + r.stderr


async def test_no_network_commands_give_up_at_once(backend: SandboxBackend) -> None:
    """pip retries a failed download with back-off; without network the sandbox tells it not
    to (net_extras). Compared with the same sandbox without it by pip's own account of its
    retries, not by the time taken (which a loaded machine blurs)."""
    cmd = "pip download --no-deps -d /tmp/d six"
    said = {}
    for extras in (False, True):
        sb = await backend.start(SandboxSpec(network="none", layers=(TOOLS,), net_extras=extras))
        try:
            r = await sb.exec(cmd, timeout=300)
        finally:
            await sb.stop()
        assert r.exit_code != 0
        said[extras] = r.stdout + r.stderr
    assert "Retrying (Retry(total=" in said[False], said[False][-2000:]  # pip's back-off
    assert "Retrying" not in said[True], said[True][-2000:]


async def test_trial_states_its_network_and_why_it_failed(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "needs-net", test="#!/bin/bash\nexec 3<>/dev/tcp/pypi.org/443 || exit 1\n"
              "echo 1 > /logs/verifier/reward.txt\n")
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.extra["network"] == "no-network" and trial.extra["network_source"] == "task"
    assert trial.status is TrialStatus.FAILED
    assert (trial.error or "").startswith("failed: the tests needed the network ('"), trial.error
    assert 'network_mode = "no-network"' in (trial.error or "")


@pytest.mark.slow
async def test_failed_trial_names_the_host_the_proxy_could_not_reach(tmp_path: Path) -> None:
    """Harbor's hello-mcp: its solution's ``curl https://astral.sh/…`` met the proxy's 502 and
    the trial's reason named the next line (``uv: command not found``). The reason names the
    host first, for the agent and for the tests (curl's CONNECT, spoken with bash alone)."""
    connect = (r'exec 3<>/dev/tcp/127.0.0.1/{port}; printf "CONNECT %s:443 HTTP/1.1\r\n'
               r'Host: %s\r\n\r\n" {host} {host} >&3; head -1 <&3'.replace("{port}", str(PROXY_PORT)))
    suite = tmp_path / "suite"
    d = make_task(suite, "no-egress", solve=connect.replace("{host}", "astral.invalid")
                  + "\nuv-not-here run x.py")
    d.joinpath("tests", "test.sh").write_text(
        "#!/bin/bash\n" + connect.replace("{host}", "tests.invalid")
        + "\necho 0 > /logs/verifier/reward.txt\n")
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("allow_internet = false", 'network_mode = "public"'))
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"])))
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.FAILED and trial.extra["network"] == "public", trial
    error = trial.error or ""
    assert error.startswith("failed: the agent tried to reach astral.invalid:443, which this "
                            "machine cannot reach (cannot resolve astral.invalid"), error
    assert "the tests tried to reach tests.invalid:443" in error, error
    assert "then: " in error and "uv-not-here" in error, error
    assert set(trial.extra["unreachable"]) == {"the agent", "the tests"}, trial.extra


def test_unreachable_reason_names_each_phases_network() -> None:
    """Refused hosts are named against the network of the phase that asked: the task's for the
    agent, a separate verifier's own for the tests (network-policy-matrix v-ve-diff)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from agentmeter.runner.network import unreachable_failure

    sep = SimpleNamespace(allow_internet=False, allowed_hosts=("www.iana.org",))
    task = cast(Any, SimpleNamespace(allow_internet=False, allowed_hosts=(), separate_verifier=sep))
    blocked = {"the agent": {"a.org:443": "refused: not in this task's allowed_hosts"},
               "the tests": {"www.iana.org:443": "unreachable: cannot resolve www.iana.org: x",
                             "example.com:443": "refused: not in this task's allowed_hosts"}}
    assert unreachable_failure(task, blocked, "boom") == (
        "failed: the agent tried to reach a.org:443, which the task's network (no-network) does "
        "not admit; the tests tried to reach www.iana.org:443, which this machine cannot reach "
        "(cannot resolve www.iana.org: x); the tests tried to reach example.com:443, which its "
        "verifier's network (allowlist: www.iana.org) does not admit; then: boom")
    assert unreachable_failure(task, {"the agent": {}}, "boom") is None

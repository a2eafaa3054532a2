"""``local/<model>`` without a real model: which models resolve, the zero price, the assembly of a
chunked GGUF, and the server's lifecycle (a stand-in for ``llama_cpp.server``: started once per
gateway, shared, stopped by its PID). tests/test_local_model_real.py runs the real server."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from proclife import running
from typer.testing import CliRunner

from agentmeter.gateway import Gateway, ModelConfigError, ModelRegistry, localmodels
from agentmeter.gateway.localmodels import LocalModelError, LocalServer, PackagedModel
from agentmeter.pricing import PriceBook
from agentmeter.records import TokenUsage

#: a stand-in llama.cpp server: lists its model, answers chat completions with fixed usage
FAKE_SERVER = r'''
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, mode, pids = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(f"/proc/{os.getpid()}/stat") as f:  # its start time: a pid alone may be reused
    started = f.read().rpartition(")")[2].split()[19]
with open(pids, "a") as f:
    f.write(f"{os.getpid()} {started}\n")
if mode == "crash":
    print("error loading model: bad magic", flush=True)
    sys.exit(3)
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send(200, {"id": "c1", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "hi"}}],
                         "usage": {"prompt_tokens": 17, "completion_tokens": 2,
                                   "total_tokens": 19}})
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def own_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty models directory, the packaged models absent, and a server installed."""
    d = tmp_path / "models"
    d.mkdir()
    monkeypatch.setenv("AGENTMETER_MODELS", str(d))
    monkeypatch.setenv("AGENTMETER_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(localmodels, "_package_dir", lambda module: None)
    monkeypatch.setattr(localmodels, "server_installed", lambda: True)
    return d


@dataclass
class FakeServer:
    pid_file: Path
    mode: str = "serve"  # or "crash": exits at once, saying why

    @property
    def started(self) -> list[tuple[int, str]]:
        """The servers started: each writes its pid and start time."""
        text = self.pid_file.read_text() if self.pid_file.exists() else ""
        return [(int(pid), started) for pid, started in (line.split() for line in text.splitlines())]


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    """LocalServer runs the stand-in; what it started is in ``.started``."""
    script = tmp_path / "fake_llama_server.py"
    script.write_text(FAKE_SERVER)
    fake = FakeServer(tmp_path / "pids")

    def command(self: LocalServer, gguf: Path, port: int) -> list[str]:
        return [sys.executable, str(script), str(port), fake.mode, str(fake.pid_file)]

    monkeypatch.setattr(LocalServer, "command", command)
    yield fake


def _alive(server: tuple[int, str]) -> bool:
    """The server (pid, start time) still runs: not if its pid now names another process, nor
    as a zombie (it is reaped by Popen.wait)."""
    return running(*server)


def test_user_servers_unchanged_and_local_is_separate() -> None:
    reg = ModelRegistry()
    for prefix, port in (("llamacpp", 8080), ("vllm", 8000), ("ollama", 11434)):
        m = reg.resolve(f"{prefix}/x")
        assert m.base_url == f"http://127.0.0.1:{port}/v1" and m.price_key is None and not m.served_here


def test_uninstalled_and_unknown_local_models_say_what_to_do(own_models: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    reg = ModelRegistry()
    with pytest.raises(ModelConfigError, match=r"not installed: pip install 'agentmeter\[local-model\]'"):
        reg.resolve("local/smollm2-135m")
    with pytest.raises(ModelConfigError, match=r"unknown local model 'nope'.*nope\.gguf"):
        reg.resolve("local/nope")
    with pytest.raises(ModelConfigError, match="letters, digits"):
        reg.resolve("local/../etc")
    (own_models / "mine.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(localmodels, "server_installed", lambda: False)
    with pytest.raises(ModelConfigError, match=r"need the llama.cpp server"):
        reg.resolve("local/mine")


def test_own_gguf_resolves_and_is_priced_at_zero_under_a_named_snapshot(own_models: Path) -> None:
    (own_models / "mine.gguf").write_bytes(b"GGUF")
    m = ModelRegistry().resolve("local/mine")
    assert m.served_here and m.local and m.wire_api == "chat"
    assert m.model_id == "mine" and m.price_key == "local/mine"
    book = PriceBook(use_genai_prices=False)
    quote = book.quote("local/mine")
    assert quote is not None and quote.source.startswith("local-zero") and not quote.fake
    assert book.cost_usd("local/mine", TokenUsage(input=1000, output=50, cache_read=10)) == 0.0
    Gateway(ModelRegistry(), book, allow_unpriced=False).check_model("local/mine")
    names = {m.name: m for m in localmodels.available()}
    assert names["mine"].installed and not names["smollm2-135m"].installed


def test_models_list_shows_installed_and_packaged(own_models: Path) -> None:
    from agentmeter.cli.app import app

    (own_models / "mine.gguf").write_bytes(b"GGUF")
    r = CliRunner().invoke(app, ["models", "list", "--json"])
    assert r.exit_code == 0, r.output
    got = {m["model"]: m["installed"] for m in json.loads(r.output)["models"]}
    assert got == {"local/smollm2-135m": False, "local/gemma3-270m": False, "local/mine": True}


def test_demo_real_model_says_how_to_get_the_extra(own_models: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``demo --real-model`` without the local-model extra stops before its first run, saying
    what to install; without the flag the demo never asks for it."""
    import agentmeter.cli.setup as setup_cli
    from agentmeter.cli import realmodel
    from agentmeter.cli.app import app

    runs: list[object] = []

    def execute_run(*args: object) -> None:
        runs.append(args)
        raise RuntimeError("no run in this test")

    monkeypatch.setattr(setup_cli, "execute_run", execute_run)
    r = CliRunner().invoke(app, ["demo", "--real-model", "--store", str(tmp_path / "s")])
    assert r.exit_code == 2 and not runs, r.output
    assert "--real-model: local model 'smollm2-135m' is not installed: pip install " \
        "'agentmeter[local-model]'" in " ".join(r.output.split())
    asked: list[bool] = []
    monkeypatch.setattr(realmodel, "missing", lambda: asked.append(True))
    r = CliRunner().invoke(app, ["demo", "--store", str(tmp_path / "s")])
    assert len(runs) == 1 and not asked  # the first step started; the extra never asked for


def test_server_threads_leave_a_core_to_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(localmodels.THREADS_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    model = localmodels.LocalModel("m", "own file", Path("/m.gguf"))
    argv = LocalServer(model).command(Path("/m.gguf"), 1)
    assert argv[argv.index("--n_threads") + 1] == argv[argv.index("--n_threads_batch") + 1] == "1"
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert localmodels.default_threads() == 1
    monkeypatch.setenv(localmodels.THREADS_ENV, "3")
    assert LocalServer(model).threads == 3
    monkeypatch.setenv(localmodels.THREADS_ENV, "0")
    with pytest.raises(LocalModelError, match="AGENTMETER_LOCAL_THREADS='0': not a positive"):
        localmodels.default_threads()


def test_chunked_gguf_is_assembled_once_and_checked(own_models: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [b"GGUF" + b"a" * 1000, b"b" * 777]
    dirs = {}
    for i, data in enumerate(parts):
        d = tmp_path / f"part{i}"
        (d / "data").mkdir(parents=True)
        (d / "data" / f"x.part{i}").write_bytes(data)
        dirs[f"part{i}"] = d
    dirs["main"] = tmp_path / "main"
    dirs["main"].mkdir()
    monkeypatch.setattr(localmodels, "_package_dir", lambda module: dirs.get(module))
    entry = PackagedModel(name="tiny", package="tiny-gguf", module="main", filename="tiny.gguf",
                          description="", license="", provenance="",
                          chunks=(("part0", "data/x.part0"), ("part1", "data/x.part1")),
                          sha256=hashlib.sha256(b"".join(parts)).hexdigest())
    monkeypatch.setitem(localmodels.PACKAGED, "tiny", entry)
    path = localmodels.gguf_path(localmodels.find("tiny"))
    assert path.read_bytes() == b"".join(parts) and path.parent == localmodels.assembled_dir()
    path.unlink()
    monkeypatch.setitem(localmodels.PACKAGED, "tiny", PackagedModel(
        **{**entry.__dict__, "sha256": "0" * 64}))
    with pytest.raises(LocalModelError, match="sha256"):
        localmodels.gguf_path(localmodels.find("tiny"))
    assert not list(localmodels.assembled_dir().iterdir())  # nothing half-made is left


async def test_one_server_per_gateway_shared_metered_and_stopped_by_pid(
        own_models: Path, fake_server: FakeServer) -> None:
    (own_models / "mine.gguf").write_bytes(b"GGUF")
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False), allow_unpriced=False)
    await gw.start(host="127.0.0.1", port=0)
    try:
        await gw.start_local_models(["local/mine", "scripted/solver", "local/mine"])
        servers = fake_server.started
        assert len(servers) == 1 and _alive(servers[0])
        async with aiohttp.ClientSession() as http:
            for trial in ("t1", "t2"):  # two trials, one server
                token = gw.open_trial(trial, "local/mine")
                async with http.post(f"{gw.base_url}/v1/chat/completions",
                                     headers={"Authorization": f"Bearer {token}"},
                                     json={"model": "local/mine", "messages": [
                                         {"role": "user", "content": "hello"}]}) as r:
                    assert r.status == 200, await r.text()
                meter = await gw.finish_trial(trial)
                assert len(meter.calls) == 1
                assert (meter.usage.input, meter.usage.output) == (17, 2)
                assert meter.cost_usd == 0.0
        assert fake_server.started == servers
    finally:
        await gw.stop()
    assert not _alive(servers[0])
    assert gw.local_servers.servers == {}


async def test_a_server_that_cannot_start_is_a_setup_error_with_its_output(
        own_models: Path, fake_server: FakeServer) -> None:
    (own_models / "mine.gguf").write_bytes(b"GGUF")
    fake_server.mode = "crash"
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False))
    await gw.start(host="127.0.0.1", port=0)
    try:
        with pytest.raises(LocalModelError, match=r"exited with 3: error loading model"):
            await gw.start_local_models(["local/mine"])
    finally:
        await gw.stop()
    assert fake_server.started and not _alive(fake_server.started[0])


async def test_a_streamed_call_to_a_local_model_is_asked_whole_and_metered_exactly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-cpp-python's server streams without usage: a streamed call to a ``local/`` model
    is asked of its server whole and streamed by the gateway in the client's API (chat,
    Responses, Messages, Gemini SSE and JSON array), metered with the server's exact counts.
    A stand-in server answers as llama-cpp-python does (a stream carries no usage)."""
    from types import SimpleNamespace

    from aiohttp import web
    from test_gateway import PATHS, headers_for, request_body
    from test_gateway_gemini import gemini_call, prompt, text_of

    from agentmeter.gateway import UpstreamModel

    asked: list[bool] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        asked.append(bool(body.get("stream")))
        if body.get("stream"):  # as llama-cpp-python: chunks, no usage even when asked
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            chunk = {"id": "x", "object": "chat.completion.chunk", "model": "fake",
                     "choices": [{"index": 0, "delta": {"content": "hello there"},
                                  "finish_reason": "stop"}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
            return resp
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": "fake", "choices": [{
                "index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello there"}}],
            "usage": {"prompt_tokens": 37, "completion_tokens": 5, "total_tokens": 42}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    models = ModelRegistry()
    models.add(UpstreamModel(name="local/fake", base_url=localmodels.LOCAL_BASE_URL,
                             upstream_model="fake", wire_api="chat", price_key="local/fake"))
    gw = Gateway(models, PriceBook(use_genai_prices=False), allow_unpriced=True)

    async def ensure(name: str) -> SimpleNamespace:
        return SimpleNamespace(base_url=base)

    await gw.start(host="127.0.0.1", port=0)
    monkeypatch.setattr(gw.local_servers, "ensure", ensure)
    try:
        for api in ("chat", "responses", "messages", "gemini-sse", "gemini-array"):
            token = gw.open_trial(api, "local/fake")
            if api.startswith("gemini"):
                status, objs, _ = await gemini_call(
                    gw, token, prompt(), "streamGenerateContent",
                    "?alt=sse" if api == "gemini-sse" else "")
                assert status == 200 and text_of(objs) == "hello there"
                assert objs[-1]["usageMetadata"]["promptTokenCount"] == 37
            else:
                async with aiohttp.ClientSession() as s, s.post(
                        gw.base_url + PATHS[api], json=request_body(api, True),
                        headers=headers_for(api, token)) as r:
                    raw = (await r.read()).decode()
                    assert r.status == 200 and r.content_type == "text/event-stream"
                assert "hello there" in raw
                assert ('"completion_tokens":5' in raw.replace(" ", "")) if api == "chat" \
                    else ('"output_tokens":5' in raw.replace(" ", ""))
            meter = await gw.finish_trial(api)
            [call] = meter.calls
            assert call.stream and call.error is None, call
            assert (call.usage.input, call.usage.output) == (37, 5), api
            assert call.cost_usd == 0.0
        assert asked == [False] * 5  # the server was asked whole every time
    finally:
        await gw.stop()
        await runner.cleanup()

"""The native agent's MCP client (agents/native/mcp.py, its transports) against a tiny MCP
server run inside a real local sandbox (tests/data/mcp_server.py): stdio and streamable HTTP
(JSON and SSE replies), driven by the scripted model through the real gateway; and the hostile
servers (a reply over the cap, a server that never answers), which cost the model an error
text, never the run."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentmeter.agents.base import AgentContext, GatewayEndpoint
from agentmeter.agents.native import factory
from agentmeter.agents.native.mcp import (
    MAX_DESCRIPTION_CHARS,
    MAX_TOOLS,
    McpSession,
    McpTools,
    tool_name,
)
from agentmeter.agents.native.mcp_http import HttpTransport, parse_http
from agentmeter.agents.native.mcp_transport import McpError
from agentmeter.gateway import Gateway, ModelRegistry, ScriptedContext
from agentmeter.pricing import PriceBook
from agentmeter.records import NATIVE_TRANSCRIPT
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import LayerSpec, SandboxSpec
from agentmeter.tasks.models import McpServer, Task
from agentmeter.tasks.suite import load_task

STARTER = Path(__file__).resolve().parent.parent / "src/agentmeter/tasks/suites/starter"
SERVER = Path(__file__).resolve().parent / "data/mcp_server.py"
SECRET = "mcp-secret-4242"
SRV = "/tmp/mcp_server.py"


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(STARTER / "log-level-counts")  # its image has python3


@pytest.fixture
async def sandbox(local_backend: LocalBackend, task: Task) -> AsyncIterator[Sandbox]:
    assert task.dockerfile is not None
    spec = SandboxSpec(layers=(LayerSpec(kind="dockerfile", source=task.dockerfile.read_text(),
                                         origin=str(task.dockerfile),
                                         context=task.environment_dir),))
    sb = await local_backend.start(spec)
    try:
        await sb.write_file(SRV, SERVER.read_bytes())
        yield sb
    finally:
        await sb.stop()


@contextlib.asynccontextmanager
async def http_servers(sb: Sandbox, *servers: tuple[int, str]) -> AsyncIterator[None]:
    """HTTP MCP servers (port, mode) running in the sandbox while the block runs."""
    runs = [asyncio.ensure_future(sb.exec(["python3", SRV, "http", str(port), mode], user="agent",
                                          timeout=120)) for port, mode in servers]
    try:
        for port, _ in servers:
            for _ in range(100):
                r = await sb.exec(["bash", "-c", 'exec 3<>"/dev/tcp/127.0.0.1/$1"', "bash",
                                   str(port)])
                if r.exit_code == 0:
                    break
                await asyncio.sleep(0.1)
        yield
    finally:
        for run in runs:
            run.cancel()
        for run in runs:
            with contextlib.suppress(BaseException):
                await run


def http(name: str, port: int) -> McpServer:
    return McpServer(name=name, transport="streamable-http", url=f"http://127.0.0.1:{port}/mcp")


def stdio(name: str, mode: str = "json") -> McpServer:
    return McpServer(name=name, transport="stdio", command="python3", args=(SRV, "stdio", mode))


async def test_scripted_model_calls_stdio_and_http_mcp_tools(sandbox: Sandbox, task: Task,
                                                              tmp_path: Path) -> None:
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False))
    await gw.start(host="127.0.0.1", port=0)
    servers = (stdio("local tools"), http("web", 8761), http("events", 8762))
    try:
        async with http_servers(sandbox, (8761, "json"), (8762, "sse")):
            token = gw.open_trial("t1", "scripted/mcp", scripted=ScriptedContext())
            ctx = AgentContext(task=task.model_copy(update={"mcp_servers": servers}),
                               sandbox=sandbox, timeout_s=60, logs_dir=tmp_path / "logs",
                               gateway=GatewayEndpoint(gw.base_url, token, "scripted/mcp"))
            run = await factory(None, {}).run(ctx)
        gw.close_trial("t1")
    finally:
        await gw.stop()
    names = ["mcp__local_tools__get_secret", "mcp__web__get_secret", "mcp__events__get_secret"]
    assert run.error is None and run.tool_calls == dict.fromkeys(names, 1), run
    assert run.final_message and SECRET in run.final_message  # the result reached the model
    log = (await sandbox.read_file("/tmp/mcp-calls.log")).decode().splitlines()
    assert log == ['get_secret {"who": "agentmeter"}'] * 3  # called, server side
    transcript = json.loads(run.artifacts[NATIVE_TRANSCRIPT][0].read_text())
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    assert results == [SECRET] * 3
    (event,) = [m for m in transcript if m.get("event") == "mcp"]
    assert "'web': 1 tool(s) offered" in event["content"]
    assert "MCP server 'web': 1 tool(s) offered" in run.notes  # recorded on the trial
    # the stdio server ended with the run (seen from the host: every exec has its own PIDs)
    assert not _commands_with(f"{SRV} stdio"), "the stdio server outlived the run"


def _commands_with(text: str) -> list[str]:
    """The command lines on the host that contain ``text`` (``pgrep -f``, which procps may not
    have installed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace")
            except OSError:
                continue  # it ended meanwhile
            if text in command:
                found.append(command)
    return found


async def test_hostile_servers_cost_an_error_text_not_the_run(sandbox: Sandbox) -> None:
    servers = (http("big", 8771), http("mute", 8772), stdio("sbig", "huge"),
               stdio("smute", "silent"), http("nobody", 8779),
               McpServer(name="legacy", transport="sse", url="http://127.0.0.1:1/sse"))
    async with http_servers(sandbox, (8771, "huge"), (8772, "silent")):
        mcp = McpTools(sandbox, servers, "/app", timeout_s=5.0, lifetime_s=60)
        try:
            await mcp.start()
            # bounded by the client's own time limit, not by this guard
            out = await asyncio.wait_for(asyncio.gather(*(
                mcp.call(tool_name(s, "get_secret"), {"who": "x"})
                for s in ("big", "mute", "sbig", "smute"))), 60)
        finally:
            await mcp.close()
    notes = " | ".join(mcp.notes)
    assert "'nobody' is not offered: cannot connect to 127.0.0.1:8779" in notes, notes
    assert "'legacy': the legacy SSE transport is not supported" in notes, notes
    big, mute, sbig, smute = out
    assert "exceeds 1000000 bytes" in big and "exceeds 1000000 bytes" in sbig, (big, sbig)
    assert "no reply within 5s" in mute and "no reply within 5s" in smute, (mute, smute)


def test_http_replies_are_parsed_incrementally() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    event = b'data: {"jsonrpc":"2.0","id":3,"result":{}}\n\n'

    def chunked(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    chunk = chunked(event)
    assert parse_http(head + chunk[:-10], False, 3) is None  # the event is not complete yet
    reply = parse_http(head + chunk, False, 3)  # complete although the stream stays open
    assert reply is not None and reply.messages == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    # a response whose id is true is no answer to request 1
    assert parse_http(head + chunked(event.replace(b"3", b"true")), False, 1) is None
    assert tool_name("a b", "x" * 80) != tool_name("a b", "x" * 81)
    assert len(tool_name("a b", "x" * 80)) == 64


class _Lister:
    """A transport whose server lists many tools with huge descriptions and schemas."""

    async def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if message["method"] == "initialize":
            return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        page = int(message["params"].get("cursor") or 0)
        big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100}
                                                for i in range(500)}}
        tools = [{"name": f"t{page}-{i}", "description": "x" * 100_000, "inputSchema": big}
                 for i in range(50)]
        return {"jsonrpc": "2.0", "id": message["id"],
                "result": {"tools": tools, "nextCursor": str(page + 1)}}  # never ends

    async def notify(self, message: dict[str, Any], timeout: float) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_a_server_listing_without_end_is_bounded() -> None:
    session = McpSession(McpServer(name="many", transport="stdio", command="x"), _Lister(), 1.0)
    notes = await session.start()
    assert len(session.tools) == MAX_TOOLS and "first 64 tools" in notes[0]
    spec = session.tools[0].spec
    assert len(spec.description) <= MAX_DESCRIPTION_CHARS + 1
    assert spec.parameters == {"type": "object", "additionalProperties": True}
    with pytest.raises(McpError, match="visible ASCII"):
        HttpTransport(None, "http://h:1/a b\r\nX: y", "/")  # type: ignore[arg-type]


class _Trickler:
    """A sandbox whose HTTP MCP server sends a 100 KB SSE reply in 100-byte writes, its response
    last, then holds the stream open."""

    async def exec(self, argv: list[str], *, on_stdout: Any, **kw: Any) -> Any:
        on_stdout(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        body = b"data: " + b"x" * 100_000 + b"\n\n" + b'data: {"jsonrpc":"2.0","id":1,"result":{"ok":1}}\n\n'
        for i in range(0, len(body), 100):
            on_stdout(body[i:i + 100])
            await asyncio.sleep(0)
        await asyncio.sleep(60)  # the stream stays open: the response must be seen without EOF


async def test_a_trickled_reply_is_not_parsed_once_per_chunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Security review 2: every chunk re-parsed the whole reply so far (quadratic: 1 MB in
    100-byte writes took 17 s of the runner loop's CPU). Now the bytes parsed stay a small
    multiple of the reply, and a response at the end of an open stream is still found."""
    from agentmeter.agents.native import mcp_http

    parsed = [0]

    def counting(raw: bytes, eof: bool, want: int | None) -> Any:
        parsed[0] += len(raw)
        return parse_http(raw, eof, want)

    monkeypatch.setattr(mcp_http, "parse_http", counting)
    transport = HttpTransport(_Trickler(), "http://mcp:8000/mcp", "/")  # type: ignore[arg-type]
    reply = await asyncio.wait_for(
        transport.request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, 30), 20)
    assert reply["result"] == {"ok": 1}
    size = 100_060
    assert parsed[0] < 40 * size, parsed[0]  # was ~500 times the reply

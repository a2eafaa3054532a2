"""The native agent's MCP client: a task's ``[[environment.mcp_servers]]`` as tools.

At the start of a run each server is asked ``initialize`` and ``tools/list``; its tools are
offered to the model as ``mcp__<server>__<tool>`` and a call of one is a ``tools/call``. The
client is our own small JSON-RPC one (MCP's wire format is a few messages): no MCP library.

Every byte to and from a server goes through the sandbox, never from the host into the task's
network: ``streamable-http`` as one ``exec`` of a bash ``/dev/tcp`` script per request, ``stdio``
as the server's ``command`` run in the sandbox for the whole run, fed through a FIFO (the
transports: agents/native/mcp_transport.py, mcp_http.py, mcp_stdio.py).

Replies are untrusted data: one reply is at most ``MAX_REPLY_BYTES`` (mcp_transport; the exec
is stopped beyond it), every request has a time limit, at most ``MAX_TOOLS`` tools per server
are offered with bounded descriptions and schemas, and a tool's result is capped like every
other tool output (ToolBox). A server that fails, lies or never answers costs the model an error
text (or its tools), never the run. The legacy ``sse`` transport is not supported (a note says so).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmeter.agents.native.mcp_http import HttpTransport
from agentmeter.agents.native.mcp_stdio import StdioTransport
from agentmeter.agents.native.mcp_transport import PROTOCOL_VERSION, McpError, Transport, clip
from agentmeter.agents.native.tools import ToolSpec
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.tasks.models import McpServer

PREFIX = "mcp__"
MAX_TOOLS = 64
MAX_LIST_PAGES = 8
MAX_DESCRIPTION_CHARS = 1_000
MAX_SCHEMA_CHARS = 16_000
MAX_NAME_CHARS = 64
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
CLIENT_INFO = {"name": "agentmeter-native", "version": "1"}


# -- sessions and tools ------------------------------------------------------------------------
@dataclass
class McpTool:
    server: str
    tool: str
    spec: ToolSpec


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, in the characters and length every wire API accepts."""
    name = _NAME_BAD.sub("_", f"{PREFIX}{server}__{tool}")
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME_CHARS - 9]}_{digest}"
    return name


def _schema(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("type") != "object":
        return {"type": "object", "properties": {}}
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError):
        return {"type": "object", "properties": {}}
    if len(text) > MAX_SCHEMA_CHARS:
        return {"type": "object", "additionalProperties": True}
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def render_result(result: Any) -> str:
    """A ``tools/call`` result as text for the model (ToolBox caps its length)."""
    if not isinstance(result, dict):
        raise McpError("the server's result is not an object")
    parts: list[str] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif kind == "resource" and isinstance(item.get("resource"), dict):
            res = item["resource"]
            text = res.get("text")
            parts.append(text if isinstance(text, str) else f"[resource {res.get('uri')!s:.200}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {item.get('uri')!s:.200}]")
        else:
            data = item.get("data")
            size = len(data) if isinstance(data, str) else 0
            parts.append(f"[{kind!s:.40} content ({item.get('mimeType')!s:.60}, {size} base64 "
                         "characters) not shown]")
    if not parts and "structuredContent" in result:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    text = "\n".join(parts) if parts else "(the tool returned no content)"
    if result.get("isError") is True:
        return f"error: the MCP tool reported an error:\n{text}"
    return text


@dataclass
class McpSession:
    server: McpServer
    transport: Transport
    timeout_s: float
    next_id: int = 1
    tools: list[McpTool] = field(default_factory=list)

    async def rpc(self, method: str, params: dict[str, Any] | None = None,
                  timeout: float | None = None) -> Any:
        mid, self.next_id = self.next_id, self.next_id + 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        reply = await self.transport.request(msg, timeout or self.timeout_s)
        err = reply.get("error")
        if err is not None:
            code = err.get("code") if isinstance(err, dict) else None
            text = err.get("message") if isinstance(err, dict) else err
            raise McpError(f"MCP error {code}: {clip(str(text), 500)}")
        if "result" not in reply:
            raise McpError("the server's response has no result")
        return reply["result"]

    async def start(self) -> list[str]:
        """``initialize``, ``notifications/initialized``, ``tools/list``; returns notes."""
        notes: list[str] = []
        result = await self.rpc("initialize", {"protocolVersion": PROTOCOL_VERSION,
                                               "capabilities": {}, "clientInfo": CLIENT_INFO})
        if not isinstance(result, dict):
            raise McpError("the initialize result is not an object")
        await self.transport.notify({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                    self.timeout_s)
        raw: list[Any] = []
        cursor: Any = None
        for _ in range(MAX_LIST_PAGES):
            page = await self.rpc("tools/list", {"cursor": cursor} if cursor else {})
            got = page.get("tools") if isinstance(page, dict) else None
            if not isinstance(got, list):
                raise McpError("the tools/list result has no tools list")
            raw += got
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor or len(raw) >= MAX_TOOLS:
                break
        for t in raw:
            if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
                continue
            if len(self.tools) == MAX_TOOLS:
                notes.append(f"MCP server {self.server.name!r}: only its first {MAX_TOOLS} "
                             "tools are offered")
                break
            desc = t.get("description")
            text = f"[MCP server {self.server.name}] " + (
                desc if isinstance(desc, str) else f"the tool {t['name']}")
            spec = ToolSpec(tool_name(self.server.name, t["name"]),
                            clip(text, MAX_DESCRIPTION_CHARS), {}, (),
                            schema=_schema(t.get("inputSchema")))
            self.tools.append(McpTool(self.server.name, t["name"][:1000], spec))
        return notes

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        return render_result(await self.rpc("tools/call", {"name": tool,
                                                           "arguments": arguments}))


class McpTools:
    """The MCP tools of one run: started with :meth:`start`, ended with :meth:`close`."""

    def __init__(self, sandbox: Sandbox, servers: Sequence[McpServer], workdir: str, *,
                 timeout_s: float, lifetime_s: float) -> None:
        self.sandbox, self.servers, self.workdir = sandbox, list(servers), workdir
        self.timeout_s, self.lifetime_s = timeout_s, lifetime_s
        self.sessions: list[McpSession] = []
        self.by_name: dict[str, tuple[McpSession, str]] = {}
        self.offered: list[tuple[ToolSpec, str]] = []
        self.notes: list[str] = []

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The offered tools' specs, in the servers' order."""
        return tuple(s for s, _ in self.offered)

    def owns(self, name: str) -> bool:
        return name in self.by_name

    async def _open(self, server: McpServer) -> tuple[McpSession | None, list[str]]:
        transport: Transport | None = None
        try:
            if server.transport == "stdio":
                assert server.command is not None
                stdio = StdioTransport(self.sandbox, server.command, server.args, self.workdir,
                                       self.lifetime_s)
                transport = stdio
                await stdio.start(self.timeout_s)
            elif server.transport == "streamable-http":
                assert server.url is not None
                transport = HttpTransport(self.sandbox, server.url, self.workdir)
            else:
                return None, [f"MCP server {server.name!r}: the legacy SSE transport is not "
                              "supported by the native agent; not offered"]
            session = McpSession(server, transport, self.timeout_s)
            notes = await session.start()
            return session, notes + [f"MCP server {server.name!r}: {len(session.tools)} "
                                     "tool(s) offered"]
        except Exception as e:  # McpError, or sandbox trouble: the server is left out
            if transport is not None:
                await transport.close()
            why = str(e) if isinstance(e, McpError) else f"{type(e).__name__}: {e}"
            return None, [f"MCP server {server.name!r} is not offered: {why}"]
        except BaseException:
            if transport is not None:
                await transport.close()
            raise

    async def start(self) -> None:
        opened = await asyncio.gather(*(self._open(s) for s in self.servers))
        for session, notes in opened:
            self.notes += notes
            if session is None:
                continue
            self.sessions.append(session)
            for t in session.tools:
                if t.spec.name in self.by_name:
                    self.notes.append(f"MCP tool {t.tool!r} of {t.server!r}: its name "
                                      f"{t.spec.name} is taken; not offered")
                    continue
                self.by_name[t.spec.name] = (session, t.tool)
                self.offered.append((t.spec, t.server))

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        session, tool = self.by_name[name]
        try:
            return await session.call(tool, arguments)
        except McpError as e:
            return f"error: MCP server {session.server.name!r}: {e}"
        except Exception as e:  # sandbox trouble is reported to the model, never raised
            return f"error: MCP server {session.server.name!r}: {type(e).__name__}: {e}"

    async def close(self) -> None:
        for s in self.sessions:
            await s.transport.close()

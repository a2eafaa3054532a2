"""A task's MCP servers (Harbor ``[[environment.mcp_servers]]``) in each agent CLI's own
configuration, as Harbor configures them:

- ``claude``  (Claude Code): a JSON file ``{"mcpServers": {name: {"type": "http"|"sse"|"stdio",
  …}}}`` passed with ``--mcp-config``, and ``ENABLE_TOOL_SEARCH=false`` (:func:`environment`):
  by default Claude Code 2.1 defers MCP tools behind its ``ToolSearch`` tool, whose answer is a
  ``tool_reference`` block only Anthropic's own API expands; behind the gateway (any model,
  translated) the model would never see the task's tools (verified with the scripted model:
  tools offered without it: none of ``mcp__…``); and ``MCP_TIMEOUT`` (its wait for a server to
  start) 120 s instead of 30: a task's stdio server starts in the agent's sandbox, under the
  sandbox's CPU limit;
- ``gemini`` (Gemini CLI, Qwen Code): ``mcpServers`` in its ``settings.json`` (``httpUrl`` for
  streamable HTTP, ``url`` for SSE, ``command``/``args`` for stdio);
- ``codex`` (Codex): ``[mcp_servers.<name>]`` tables in its ``config.toml`` (``url`` for
  streamable HTTP, ``command``/``args`` for stdio; Codex has no SSE transport: such a server is
  left out with a note).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from agentmeter.tasks.models import McpServer

McpStyle = Literal["claude", "gemini", "codex"]


def _claude(server: McpServer) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"type": "stdio", "command": server.command, "args": list(server.args)}
    return {"type": "http" if server.transport == "streamable-http" else "sse",
            "url": server.url}


def _gemini(server: McpServer) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"command": server.command, "args": list(server.args)}
    key = "httpUrl" if server.transport == "streamable-http" else "url"
    return {key: server.url}


def _toml_table(server: McpServer) -> str:
    lines = [f"\n[mcp_servers.{json.dumps(server.name)}]"]
    if server.transport == "stdio":
        lines += [f"command = {json.dumps(server.command)}",
                  f"args = {json.dumps(list(server.args))}"]
    else:
        lines.append(f"url = {json.dumps(server.url)}")
    return "\n".join(lines) + "\n"


def environment(style: McpStyle | None, servers: Sequence[McpServer]) -> dict[str, str]:
    """Environment the CLI needs for the servers to reach the model (module doc)."""
    if servers and style == "claude":
        return {"ENABLE_TOOL_SEARCH": "false", "MCP_TIMEOUT": "120000"}
    return {}


def configure(style: McpStyle | None, servers: Sequence[McpServer], files: dict[str, str],
              state: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(config files, extra arguments, notes): ``files`` (path -> rendered content) with the
    servers added in the CLI's ``style``. No servers: unchanged; a CLI without MCP support
    (``style`` None): unchanged, with a note."""
    if not servers:
        return files, [], []
    names = ", ".join(s.name for s in servers)
    if style is None:
        return files, [], [f"the task's MCP servers ({names}) are not configured for this "
                            "agent (it has no MCP support here)"]
    out = dict(files)
    if style == "claude":
        path = f"{state}/mcp.json"
        out[path] = json.dumps({"mcpServers": {s.name: _claude(s) for s in servers}}, indent=1)
        return out, ["--mcp-config", path], []
    if style == "gemini":
        path = next(p for p in out if p.endswith("/settings.json"))
        settings = json.loads(out[path])
        settings["mcpServers"] = {s.name: _gemini(s) for s in servers}
        out[path] = json.dumps(settings, indent=1)
        return out, [], []
    path = next(p for p in out if p.endswith("/config.toml"))
    usable = [s for s in servers if s.transport != "sse"]
    out[path] = out[path].rstrip("\n") + "\n" + "".join(_toml_table(s) for s in usable)
    notes = [f"MCP server {s.name!r}: Codex has no SSE transport; not configured"
             for s in servers if s.transport == "sse"]
    return out, [], notes

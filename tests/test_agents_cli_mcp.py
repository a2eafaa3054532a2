"""A task's MCP servers (Harbor ``[[environment.mcp_servers]]``) in each agent CLI's own
configuration (agents/cli/mcp.py), as Harbor writes them."""

from __future__ import annotations

import json
import tomllib

from agentmeter.agents.cli import claude_code, codex, gemini_cli, mcp, qwen_code
from agentmeter.agents.cli.spec import render
from agentmeter.tasks.models import McpServer

HTTP = McpServer(name="mcp-server", transport="streamable-http", url="http://mcp-server:8000/mcp")
SSE = McpServer(name="events", transport="sse", url="http://events:9000/sse")
STDIO = McpServer(name="tools", transport="stdio", command="python3", args=("-m", "tools"))
VALUES = {"home": "/home/agent", "model_id": "m", "base_url": "http://127.0.0.1:1",
          "token": "t", "state": "/home/agent/.agentmeter/x"}


def _files(spec: object) -> dict[str, str]:
    return {render(p, VALUES): render(c, VALUES) for p, c in spec.files.items()}  # type: ignore[attr-defined]


def test_claude_code_gets_an_mcp_config_file() -> None:
    files, args, notes = mcp.configure(claude_code.SPEC.mcp, [HTTP, SSE, STDIO],
                                       _files(claude_code.SPEC), VALUES["state"])
    assert args == ["--mcp-config", f"{VALUES['state']}/mcp.json"] and not notes
    assert json.loads(files[args[1]])["mcpServers"] == {
        "mcp-server": {"type": "http", "url": "http://mcp-server:8000/mcp"},
        "events": {"type": "sse", "url": "http://events:9000/sse"},
        "tools": {"type": "stdio", "command": "python3", "args": ["-m", "tools"]}}


def test_gemini_and_qwen_settings_keep_theirs_and_add_servers() -> None:
    for spec in (gemini_cli.SPEC, qwen_code.SPEC):
        before = _files(spec)
        files, args, notes = mcp.configure(spec.mcp, [HTTP, STDIO], before, VALUES["state"])
        (path,) = [p for p in files if p.endswith("settings.json")]
        settings = json.loads(files[path])
        assert settings["mcpServers"] == {"mcp-server": {"httpUrl": "http://mcp-server:8000/mcp"},
                                          "tools": {"command": "python3", "args": ["-m", "tools"]}}
        assert {k: v for k, v in settings.items() if k != "mcpServers"} == json.loads(before[path])
        assert not args and not notes


def test_codex_config_toml_gets_tables_and_says_what_it_cannot() -> None:
    files, args, notes = mcp.configure(codex.SPEC.mcp, [HTTP, SSE, STDIO], _files(codex.SPEC),
                                       VALUES["state"])
    (path,) = [p for p in files if p.endswith("config.toml")]
    config = tomllib.loads(files[path])
    assert config["mcp_servers"] == {"mcp-server": {"url": "http://mcp-server:8000/mcp"},
                                     "tools": {"command": "python3", "args": ["-m", "tools"]}}
    assert config["model_provider"] == "agentmeter" and not args
    assert notes and "events" in notes[0]


def test_claude_code_is_told_not_to_hide_mcp_tools_behind_tool_search() -> None:
    assert mcp.environment("claude", [STDIO]) == {"ENABLE_TOOL_SEARCH": "false",
                                                  "MCP_TIMEOUT": "120000"}
    assert mcp.environment("claude", []) == {} and mcp.environment("gemini", [STDIO]) == {}


def test_no_servers_changes_nothing_and_no_support_is_noted() -> None:
    files = _files(claude_code.SPEC)
    assert mcp.configure("claude", [], files, "/s") == (files, [], [])
    _, args, notes = mcp.configure(None, [HTTP], files, "/s")
    assert not args and "mcp-server" in notes[0]

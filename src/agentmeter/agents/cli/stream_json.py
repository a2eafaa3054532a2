"""The ``stream-json`` event stream shared by Claude Code and Qwen Code (Qwen copied its shape).

One JSON object per line: ``system``/``init``, ``assistant`` messages whose ``content`` holds
``text`` and ``tool_use`` blocks, ``user`` messages with ``tool_result`` blocks, and a final
``result`` event with ``result`` (the final answer), ``num_turns``, ``is_error`` and ``usage``.
How a CLI's ``usage`` maps to :class:`TokenUsage` differs, so it is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentmeter.agents.cli.spec import ParsedRun, ParseInput, Step, json_lines
from agentmeter.records import TokenUsage

#: tool argument keys that name a file being read
_PATH_KEYS = ("file_path", "absolute_path", "path")
_READ_TOOLS = ("Read", "read_file", "read_many_files", "ReadFile")

UsageReader = Callable[[dict[str, Any]], TokenUsage | None]


def parse(run: ParseInput, usage_of: UsageReader) -> ParsedRun:
    out = ParsedRun()
    events = json_lines(run.stdout)
    if run.stdout.strip() and not events:
        raise ValueError(f"stdout is not stream-json: {run.stdout.strip()[:200]!r}")
    last_text: str | None = None
    for ev in events:
        kind = ev.get("type")
        msg = ev.get("message") if isinstance(ev.get("message"), dict) else {}
        assert isinstance(msg, dict)
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        assert isinstance(content, list)
        if kind == "assistant":
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    last_text = str(block["text"])
                    out.message(last_text)
                elif block.get("type") == "tool_use":
                    name = str(block.get("name") or "?")
                    args = block.get("input")
                    path = next((str(args[k]) for k in _PATH_KEYS
                                 if isinstance(args, dict) and name in _READ_TOOLS and args.get(k)),
                                None)
                    out.tool(name, args, path)
        elif kind == "user":
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    text = block.get("content")
                    out.steps.append(Step("tool_result", text=str(text)[:2000]))
        elif kind == "result":
            out.completed = True
            turns = ev.get("num_turns")
            out.turns = turns if isinstance(turns, int) else out.turns
            result = ev.get("result")
            if ev.get("is_error") or str(ev.get("subtype", "success")) != "success":
                errors = ev.get("errors") or result or ev.get("subtype")
                out.cli_error = f"{ev.get('subtype')}: {str(errors)[:1000]}"
                out.completed = False
            elif isinstance(result, str):
                out.final_message = result
            out.usage = usage_of(ev)
    if out.final_message is None and out.completed:
        out.final_message = last_text
    return out

"""Qwen Code (npm ``@qwen-code/qwen-code``): OpenAI Chat Completions, streaming.

``qwen --auth-type openai -m <model> --yolo -o stream-json <prompt>`` with the gateway as
``OPENAI_BASE_URL`` (``--yolo`` auto-approves every tool). Its stream-json has Claude Code's shape;
the final ``result`` event carries the run's usage.

``model.generationConfig.maxRetries`` 0: no client retries (the OpenAI SDK's own, 2 by default,
and its rate-limit loop, 10 by default with minutes of backoff); retrying is the gateway's
decision. Two replays of a stream cut before any output are built in and cannot be turned off.
``streamIdleTimeoutMs`` and ``streamMaxLifetimeMs`` 0: its stream guards are off (by default it
drops a stream with no chunk for 240 s, SSE comments not counted, or waiting 900 s in all, and
retries it); how long a call may take is the harness's decision (the agent timeout).
``QWEN_CODE_NO_RELAUNCH``: the CLI runs in the process the harness started (by default it
re-executes itself in a child node with a heap of half the machine's memory).
"""

from __future__ import annotations

from typing import Any

from agentmeter.agents.cli import stream_json
from agentmeter.agents.cli.spec import CliDefinition, CliSpec, ParsedRun, ParseInput, int_of
from agentmeter.records import TokenUsage

SETTINGS = """\
{"security": {"auth": {"selectedType": "openai"}},
 "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
 "model": {"generationConfig": {"maxRetries": 0, "streamIdleTimeoutMs": 0,
                                 "streamMaxLifetimeMs": 0}}}
"""

SPEC = CliSpec(
    name="qwen-code",
    package="@qwen-code/qwen-code",
    default_version="0.24.4",
    runtime="node",
    wire_apis=("chat",),
    executable="bin/qwen",
    args=("--auth-type", "openai", "-m", "${model}", "--yolo", "-o", "stream-json", "${prompt}"),
    continue_args=("--continue",),
    env={
        "OPENAI_BASE_URL": "${base_url}/v1",
        "OPENAI_API_KEY": "${token}",
        "OPENAI_MODEL": "${model}",
        "QWEN_CODE_DISABLE_TELEMETRY": "1",
        # else it starts itself again in a child node with a larger heap (as Gemini CLI does):
        # a second start of its bundle on every run
        "QWEN_CODE_NO_RELAUNCH": "true",
        "NO_COLOR": "1",
    },
    files={"${home}/.qwen/settings.json": SETTINGS},
    completion_marker='"type":"result"',
    completion_grace_s=2.0,
    transcripts=("${home}/.qwen/projects", "${home}/.qwen/tmp"),
    reported_usage=("input", "output", "cache_read"),
    mcp="gemini",
)


def usage_of(result: dict[str, Any]) -> TokenUsage | None:
    u = result.get("usage")
    if not isinstance(u, dict):
        return None
    return TokenUsage(input=int_of(u, "input_tokens"), output=int_of(u, "output_tokens"),
                      cache_read=int_of(u, "cache_read_input_tokens"))


def parse(run: ParseInput) -> ParsedRun:
    return stream_json.parse(run, usage_of)


DEFINITION = CliDefinition(SPEC, parse)

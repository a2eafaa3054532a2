"""Codex CLI (npm ``@openai/codex``): OpenAI Responses only, driven by ``codex exec --json``.

The gateway is a custom model provider in ``$CODEX_HOME/config.toml`` (``OPENAI_BASE_URL`` alone
is ignored). Stdout is JSONL: ``item.*`` events and ``turn.completed`` with the usage of the whole
turn; the process lingers a few seconds after that (a plugin sync), so the harness ends it once
``turn.completed`` is seen. The rollout (``$CODEX_HOME/sessions/**/rollout-*.jsonl``) has the
model's own tool names (``exec_command``, ``apply_patch``, …) and per-call ``token_count`` events.

``request_max_retries`` and ``stream_max_retries`` 0: retrying is the gateway's decision.
``stream_idle_timeout_ms`` one hour: by default Codex drops a stream that sent no SSE event for
300 s ("idle timeout waiting for SSE"; an SSE comment is no event), which a model slow to its
first token exceeds; how long a call may take is the harness's decision (the agent timeout).
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.agents.cli.spec import (
    CliDefinition,
    CliSpec,
    ParsedRun,
    ParseInput,
    Step,
    int_of,
    json_lines,
)
from agentmeter.records import TokenUsage

CONFIG = """\
model = "${model_id}"
model_provider = "agentmeter"
check_for_update_on_startup = false

[model_providers.agentmeter]
name = "agentmeter gateway"
base_url = "${base_url}/v1"
env_key = "AGENTMETER_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 3600000

[analytics]
enabled = false
"""

SPEC = CliSpec(
    name="codex",
    package="@openai/codex",
    default_version="0.169.0",
    runtime="node",
    wire_apis=("responses",),
    executable="bin/codex",
    args=("exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
          "--model", "${model_id}", "--", "${prompt}"),
    env={"CODEX_HOME": "${home}/.codex", "AGENTMETER_API_KEY": "${token}",
         "NO_COLOR": "1", "RUST_LOG": "error"},
    files={"${home}/.codex/config.toml": CONFIG},
    completion_marker='"type":"turn.completed"',
    completion_grace_s=0.5,
    transcripts=("${home}/.codex/sessions",),
    reported_usage=("input", "output", "cache_read", "reasoning"),
    mcp="codex",
)

def _usage(u: Any) -> TokenUsage:
    return TokenUsage(input=int_of(u, "input_tokens"), output=int_of(u, "output_tokens"),
                      cache_read=int_of(u, "cached_input_tokens"),
                      reasoning=int_of(u, "reasoning_output_tokens"))


def _rollout(text: str) -> ParsedRun | None:
    """Steps, tool calls and model turns from a rollout file (None if it has none)."""
    out = ParsedRun()
    for ev in json_lines(text):
        payload = ev.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if ev.get("type") == "response_item" and kind in ("function_call", "custom_tool_call",
                                                          "local_shell_call"):
            name = str(payload.get("name") or kind)
            raw = payload.get("arguments", payload.get("input"))
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                args = raw
            out.tool(name, args)
        elif ev.get("type") == "response_item" and kind and str(kind).endswith("_call_output"):
            out.steps.append(Step("tool_result", text=str(payload.get("output"))[:2000]))
        elif ev.get("type") == "response_item" and kind == "message" \
                and payload.get("role") == "assistant":
            text = "".join(str(c.get("text") or "") for c in payload.get("content") or []
                           if isinstance(c, dict))
            out.message(text)
        elif ev.get("type") == "event_msg" and kind == "token_count":
            info = payload.get("info")
            if isinstance(info, dict) and isinstance(info.get("last_token_usage"), dict):
                out.turns = (out.turns or 0) + 1
    return out if out.steps or out.turns else None


def parse(run: ParseInput) -> ParsedRun:
    events = json_lines(run.stdout)
    if run.stdout.strip() and not events:
        raise ValueError(f"stdout is not Codex JSONL: {run.stdout.strip()[:200]!r}")
    rollouts = [r for p, t in sorted(run.transcripts.items()) if "rollout-" in p
                if (r := _rollout(t)) is not None]
    # the rollout has the model's own tool names; stdout's item kinds are the fallback
    out = rollouts[0] if rollouts else ParsedRun()
    for ev in events:
        kind = ev.get("type")
        item = ev.get("item") if isinstance(ev.get("item"), dict) else {}
        assert isinstance(item, dict)
        if kind == "item.completed" and item.get("type") == "agent_message":
            out.final_message = str(item.get("text") or "")
            if not rollouts:
                out.message(out.final_message)
        elif kind == "item.started" and item.get("type") in ("command_execution", "mcp_tool_call",
                                                             "web_search", "file_change"):
            if not rollouts:
                out.tool(str(item.get("type")), item.get("command"))
        elif kind == "turn.completed":
            out.add_usage(_usage(ev.get("usage")))
            out.completed = True
        elif kind in ("turn.failed", "error"):
            err = ev.get("error") if isinstance(ev.get("error"), dict) else ev
            assert isinstance(err, dict)
            out.cli_error = str(err.get("message") or err)[:1000]
            out.steps.append(Step("event", text=out.cli_error))
    return out


DEFINITION = CliDefinition(SPEC, parse)

"""Claude Code (npm ``@anthropic-ai/claude-code``): Anthropic Messages, ``claude -p``.

Pointed at the gateway with ``ANTHROPIC_BASE_URL`` and the trial token as ``ANTHROPIC_API_KEY``.
Side tasks normally go to a small "haiku" model: every model alias is set to the trial's model
so those calls are metered (and billed) as the configured model. A Harbor task's agent may be
the sandbox's root (its image's USER), where ``--dangerously-skip-permissions`` is refused
unless ``IS_SANDBOX=1`` says the process is sandboxed, as it is (Harbor sets it too).

Self-reported usage: the ``result`` event's ``modelUsage`` (per model, side calls included),
falling back to its ``usage`` (main loop only). It reports no reasoning tokens (Messages has none).
Its ``total_cost_usd`` uses Anthropic's own price list, meaningless for other models: ignored.
"""

from __future__ import annotations

from typing import Any

from agentmeter.agents.cli import stream_json
from agentmeter.agents.cli.spec import CliDefinition, CliSpec, ParsedRun, ParseInput, int_of
from agentmeter.records import TokenUsage

SETTINGS = """\
{"permissions": {"defaultMode": "bypassPermissions"}, "autoUpdates": false,
 "includeCoAuthoredBy": false, "cleanupPeriodDays": 3650}
"""

SPEC = CliSpec(
    name="claude-code",
    package="@anthropic-ai/claude-code",
    default_version="2.1.330",
    runtime="node",
    wire_apis=("messages",),
    executable="bin/claude",
    args=("-p", "--output-format", "stream-json", "--verbose", "--model", "${model_id}",
          "--dangerously-skip-permissions", "--", "${prompt}"),
    continue_args=("--continue",),
    env={
        "ANTHROPIC_BASE_URL": "${base_url}",
        "ANTHROPIC_API_KEY": "${token}",
        "ANTHROPIC_MODEL": "${model_id}",
        "ANTHROPIC_SMALL_FAST_MODEL": "${model_id}",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "${model_id}",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "${model_id}",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "${model_id}",
        "CLAUDE_CODE_SUBAGENT_MODEL": "${model_id}",
        "CLAUDE_CONFIG_DIR": "${home}/.claude",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",  # root (a Harbor image without USER) may skip permissions
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "NO_COLOR": "1",
        # no client retries: each is a metered call; retrying is the gateway's decision
        "CLAUDE_CODE_MAX_RETRIES": "0",
    },
    files={"${home}/.claude/settings.json": SETTINGS},
    completion_marker='"type":"result"',
    completion_grace_s=2.0,
    transcripts=("${home}/.claude/projects",),
    reported_usage=("input", "output", "cache_creation", "cache_read"),
    mcp="claude",
)


def usage_of(result: dict[str, Any]) -> TokenUsage | None:
    per_model = result.get("modelUsage")
    if isinstance(per_model, dict) and per_model:
        total: TokenUsage | None = None
        for u in per_model.values():
            uncached = int_of(u, "inputTokens")
            creation = int_of(u, "cacheCreationInputTokens")
            read = int_of(u, "cacheReadInputTokens")
            one = TokenUsage(
                input=None if uncached is None else uncached + (creation or 0) + (read or 0),
                output=int_of(u, "outputTokens"), cache_creation=creation, cache_read=read)
            total = one if total is None else total + one
        return total
    u = result.get("usage")
    if not isinstance(u, dict):
        return None
    uncached = int_of(u, "input_tokens")
    creation = int_of(u, "cache_creation_input_tokens")
    read = int_of(u, "cache_read_input_tokens")
    return TokenUsage(input=None if uncached is None else uncached + (creation or 0) + (read or 0),
                      output=int_of(u, "output_tokens"), cache_creation=creation, cache_read=read)


def parse(run: ParseInput) -> ParsedRun:
    return stream_json.parse(run, usage_of)


DEFINITION = CliDefinition(SPEC, parse)

"""Gemini CLI (npm ``@google/gemini-cli``): the Gemini API (``generateContent``), streaming.

``gemini -m <model> --approval-mode yolo -o stream-json --prompt=<prompt>`` with the gateway as
``GOOGLE_GEMINI_BASE_URL`` (the Google GenAI SDK then calls
``<base>/v1beta/models/<model>:streamGenerateContent?alt=sse``) and the trial token as
``GEMINI_API_KEY`` (sent as the ``x-goog-api-key`` header). Facts read from the 0.61.0 bundle:

- ``security.auth.selectedType`` must be ``gemini-api-key``: with only the base URL set the CLI
  picks its ``gateway`` auth type, which its non-interactive check rejects ("Invalid auth
  method selected.", exit 41).
- An untrusted folder silently turns ``--approval-mode yolo`` back into ``default`` (tools then
  wait for approval that never comes): folder trust is disabled (and the workspace trusted).
- Without ``GEMINI_CLI_NO_RELAUNCH`` it re-executes itself in a child node with a larger heap.
- ``general.maxAttempts`` 1: no client retries (the gateway retries upstream). By default it
  retries a 429 (a budget refusal) ten times with backoff, minutes per trial.
- ``--resume latest`` continues the working directory's latest session; each process's stats
  count only its own calls.
- Usage statistics, telemetry, auto-update and its notice, IDE mode and checkpointing are off;
  with them off the only connection it opens is to the gateway.

Its stream-json (not Claude Code's shape): ``init``; ``message`` (``role`` user/assistant, the
assistant's text in ``delta`` chunks); ``tool_use`` (``tool_name``, ``tool_id``,
``parameters``); ``tool_result`` (``tool_id``, ``status``, ``output``, ``error``); ``error``
(``severity``, ``message``); a final ``result`` (``status`` success/error, ``error``, ``stats``).

Self-reported usage: the ``result`` event's ``stats.models`` (every API call of this process,
keyed by the model the replies named), summed. Per model ``input_tokens`` is Gemini's
``promptTokenCount`` (cached tokens included, as the neutral ``input``), ``cached`` its
``cachedContentTokenCount`` and ``output_tokens`` its ``candidatesTokenCount``, which leaves out
thinking tokens; ``total_tokens`` is ``totalTokenCount`` = prompt + candidates + thoughts
(+ tool-use prompt tokens, which only server-side tools produce: Gemini CLI declares function
tools only). So neutral ``output`` (reasoning included) = total − prompt and ``reasoning`` =
total − prompt − candidates. Its native transcript is ``~/.gemini/tmp/<project>/chats/*.jsonl``.
"""

from __future__ import annotations

import re
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

SETTINGS = """\
{"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
 "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false},
 "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false,
             "checkpointing": {"enabled": false}, "sessionRetention": {"enabled": false},
             "maxAttempts": 1},
 "ide": {"enabled": false},
 "advanced": {"autoConfigureMemory": false}}
"""

SPEC = CliSpec(
    name="gemini-cli",
    package="@google/gemini-cli",
    default_version="0.61.0",
    runtime="node",
    wire_apis=("gemini",),
    executable="bin/gemini",
    # "--prompt=<text>": with "-p <text>" an instruction starting with "-" is read as options
    args=("-m", "${model_id}", "--approval-mode", "yolo", "-o", "stream-json",
          "--prompt=${prompt}"),
    continue_args=("--resume", "latest"),
    env={
        "GOOGLE_GEMINI_BASE_URL": "${base_url}",
        "GEMINI_API_KEY": "${token}",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "1",
        "GEMINI_TELEMETRY_ENABLED": "false",
        "NO_COLOR": "1",
    },
    files={"${home}/.gemini/settings.json": SETTINGS},
    completion_marker='"type":"result"',
    completion_grace_s=2.0,
    transcripts=("${home}/.gemini/tmp",),
    reported_usage=("input", "output", "cache_read", "reasoning"),
    mcp="gemini",
)

#: tool argument keys that name a file being read, and the tools that read one
_PATH_KEYS = ("file_path", "absolute_path", "path")
_READ_TOOLS = ("read_file",)


#: a stderr line saying why it stopped before any result event (its argument parser prints the
#: reason first and its whole help after it, so the tail of stderr does not say)
_REASON = re.compile(r"^(Unknown argument|Not enough|Invalid|Missing|Error|Fatal|"
                     r"Please set|When using)|Error:")


def usage_of(stats: Any) -> TokenUsage | None:
    """The run's usage from a ``result`` event's ``stats`` (see the module doc)."""
    models = stats.get("models") if isinstance(stats, dict) else None
    if not isinstance(models, dict) or not models:
        return None
    total: TokenUsage | None = None
    for m in models.values():
        prompt, candidates = int_of(m, "input_tokens"), int_of(m, "output_tokens")
        all_tokens = int_of(m, "total_tokens")
        output = reasoning = None
        if prompt is not None and all_tokens is not None:
            output = max(all_tokens - prompt, candidates or 0)
            reasoning = output - (candidates or 0)
        one = TokenUsage(input=prompt, output=output if output is not None else candidates,
                         cache_read=int_of(m, "cached"), reasoning=reasoning)
        total = one if total is None else total + one
    return total


def parse(run: ParseInput) -> ParsedRun:
    out = ParsedRun()
    events = json_lines(run.stdout)
    if run.stdout.strip() and not events:
        raise ValueError(f"stdout is not stream-json: {run.stdout.strip()[:200]!r}")
    turns = 0
    in_turn = False  # the last event belonged to a model reply
    text: list[str] = []  # the current reply's text chunks
    last_text: str | None = None

    def end_text() -> None:
        nonlocal last_text
        if text:
            last_text = "".join(text)
            out.message(last_text)
            text.clear()

    for ev in events:
        kind = ev.get("type")
        if (kind == "message" and ev.get("role") == "assistant") or kind == "tool_use":
            if not in_turn:
                turns, in_turn, last_text = turns + 1, True, None
            if kind == "message":
                text.append(str(ev.get("content") or ""))
                continue
            end_text()
            name = str(ev.get("tool_name") or "?")
            args = ev.get("parameters")
            path = next((str(args[k]) for k in _PATH_KEYS
                         if isinstance(args, dict) and name in _READ_TOOLS and args.get(k)), None)
            out.tool(name, args, path)
            continue
        end_text()
        in_turn = False
        if kind == "tool_result":
            err = ev.get("error")
            shown = ev.get("output") if ev.get("status") != "error" or not isinstance(err, dict) \
                else f"error: {err.get('message')}"
            out.steps.append(Step("tool_result", text=str(shown or "")[:2000]))
        elif kind == "error":
            out.steps.append(Step("event", text=f"{ev.get('severity')}: {ev.get('message')}"))
        elif kind == "result":
            out.usage = usage_of(ev.get("stats"))
            err = ev.get("error")
            if ev.get("status") == "success":
                out.completed = True
                out.final_message = last_text
            else:
                detail = err.get("message") if isinstance(err, dict) else err
                kind_of = err.get("type") if isinstance(err, dict) else None
                out.cli_error = f"{kind_of or ev.get('status')}: {str(detail)[:1000]}"
    end_text()
    out.turns = turns if turns or out.completed else None
    if not out.completed and out.cli_error is None and run.exit_code not in (0, None):
        out.cli_error = next((line.strip() for line in run.stderr.splitlines()
                              if _REASON.search(line.strip())), None)
    return out


DEFINITION = CliDefinition(SPEC, parse)

"""mini-swe-agent (PyPI ``mini-swe-agent`` + ``mcp``): OpenAI Chat Completions via litellm,
non-streaming, one ``bash`` tool; it stops when the model runs
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (``--exit-immediately``, ``-y`` = no confirmation).

litellm must not fetch its price map from the internet (``LITELLM_LOCAL_MODEL_COST_MAP``) and
must not fail on models it cannot price (``MSWEA_COST_TRACKING=ignore_errors``); without the
``mcp`` package litellm retries an import error until the timeout. Stdout is a rich console, so
everything is read from the trajectory file (``-o``): per-message ``extra.response.usage`` and
``info.model_stats``/``exit_status``/``submission``.
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
    chat_tool_calls,
    int_of,
)
from agentmeter.records import TokenUsage

TRAJECTORY = "${state}/trajectory.json"

SPEC = CliSpec(
    name="mini-swe-agent",
    package="mini-swe-agent",
    default_version="2.4.6",
    runtime="python",
    extra_requirements=("mcp",),
    wire_apis=("chat",),
    executable="bin/mini",
    args=("-y", "--exit-immediately", "-m", "openai/${model}", "-c", "mini.yaml",
          "-c", "model.model_kwargs.api_base=${base_url}/v1",
          "-c", "agent.cost_limit=0", "-o", TRAJECTORY, "-t", "${prompt}"),
    env={
        "OPENAI_API_KEY": "${token}",
        "MSWEA_GLOBAL_CONFIG_DIR": "${state}/config",
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "NO_COLOR": "1",
        "TERM": "dumb",
    },
    transcripts=(TRAJECTORY,),
    reported_usage=("input", "output", "cache_read"),
)

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _usage(u: Any) -> TokenUsage:
    return TokenUsage(input=int_of(u, "prompt_tokens"), output=int_of(u, "completion_tokens"),
                      cache_read=int_of(u, "prompt_tokens_details", "cached_tokens"),
                      reasoning=int_of(u, "completion_tokens_details", "reasoning_tokens"))


def parse(run: ParseInput) -> ParsedRun:
    out = ParsedRun()
    texts = [t for p, t in run.transcripts.items() if p.endswith("trajectory.json")]
    if not texts:
        out.cli_error = "no trajectory file was written"
        return out
    traj = json.loads(texts[0])
    if not isinstance(traj, dict):
        raise ValueError("the trajectory is not a JSON object")
    turns = 0
    for m in traj.get("messages") or []:
        if not isinstance(m, dict):
            continue
        extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
        assert isinstance(extra, dict)
        if m.get("role") == "assistant":
            turns += 1
            if isinstance(m.get("content"), str) and m["content"].strip():
                out.message(m["content"])
            for name, args in chat_tool_calls(m):
                out.tool(name, args)
            for action in extra.get("actions") or []:
                if not m.get("tool_calls") and isinstance(action, dict):
                    out.tool("bash", action)  # text protocol: one fenced command per turn
            response = extra.get("response")
            if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                out.add_usage(_usage(response["usage"]))
        elif m.get("role") == "user" and isinstance(extra.get("response"), dict):
            # a reply mini-swe-agent refused (FormatError: no bash call, or one it could not
            # run): a model call and a turn all the same, fed back to the model as this message
            turns += 1
            response = extra["response"]
            choices = response.get("choices")
            reply = choices[0].get("message") if isinstance(choices, list) and choices \
                and isinstance(choices[0], dict) else None
            if isinstance(reply, dict):
                if isinstance(reply.get("content"), str) and reply["content"].strip():
                    out.message(reply["content"])
                for name, args in chat_tool_calls(reply):  # not run: named in the event below
                    out.steps.append(Step("event", text=f"tool call not run: {name}",
                                          tool=name, arguments=args))
            if isinstance(response.get("usage"), dict):
                out.add_usage(_usage(response["usage"]))
            out.steps.append(Step("event", text=f"{extra.get('interrupt_type') or 'refused'}: "
                                                f"{str(m.get('content'))[:2000]}"))
        elif m.get("role") in ("tool", "user") and turns:
            out.steps.append(Step("tool_result", text=str(m.get("content"))[:2000]))
    out.turns = turns
    info = traj.get("info") if isinstance(traj.get("info"), dict) else {}
    assert isinstance(info, dict)
    status = str(info.get("exit_status") or "")
    if status == "Submitted":
        out.completed = True
        out.final_message = str(info.get("submission") or "")
    elif status:
        out.cli_error = f"exit status {status}"
        out.steps.append(Step("event", text=out.cli_error))
    return out


DEFINITION = CliDefinition(SPEC, parse)

"""The native agent: a minimal tool-calling loop run on the host.

The model is called through the gateway endpoint (Chat Completions or Anthropic Messages); the
tools run inside the sandbox as the ``agent`` user. The loop stops on ``finish``, on a reply with
no tool calls, after ``max_turns`` model calls, on a model error or budget refusal, or when the
trial's time is up. Problems are reported in the returned :class:`AgentRun`, never raised.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

import agentmeter
from agentmeter.agents.base import AgentContext, AgentRun
from agentmeter.agents.native.compaction import ContextMeter, compact, estimate_tokens
from agentmeter.agents.native.mcp import McpTools
from agentmeter.agents.native.messages import Message
from agentmeter.agents.native.model_client import ModelClient, ModelError
from agentmeter.agents.native.options import NativeOptions
from agentmeter.agents.native.tools import FINISH, MEMORY_PATH, TOOLS, ToolBox, ToolSpec
from agentmeter.records import NATIVE_TRANSCRIPT, TokenUsage
from agentmeter.sandbox.spec import LayerSpec

SYSTEM_PROMPT = """\
You are an autonomous software engineer working in a Linux sandbox, as user `agent`.
Your working directory is {workdir}; relative paths are resolved from it.
Complete the task you are given using your tools: look at the files, run commands, change what
needs changing, and check your work by running it. Nobody will answer questions, so do not ask.
Keep notes worth remembering (plans, findings) with update_memory: older turns may be dropped
from the conversation when it grows long, but the memory bank is always shown here.
When the task is done, call `finish` with a short summary of what you did."""


def system_prompt(workdir: str, memory: str, memory_path: str = MEMORY_PATH) -> str:
    text = SYSTEM_PROMPT.format(workdir=workdir)
    if memory.strip():
        text += f"\n\n## Memory bank ({memory_path})\n{memory.rstrip()}"
    return text


@dataclass
class _RunState:
    """What the loop has done so far; survives a timeout or an unexpected failure."""

    transcript: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: Counter[str] = field(default_factory=Counter)
    files_read: list[str] = field(default_factory=list)
    turns: int = 0
    usage: TokenUsage | None = None
    final_message: str | None = None
    error: str | None = None
    #: what the trial records beside the transcript (which MCP servers were offered, or why not)
    notes: list[str] = field(default_factory=list)

    def record(self, message: Message, **extra: Any) -> None:
        self.transcript.append(message.to_json() | extra)

    def event(self, kind: str, content: str) -> None:
        self.transcript.append({"role": "event", "event": kind, "content": content})


class NativeAgent:
    name = "native"
    uses_model = True

    def __init__(self, options: NativeOptions | None = None, version: str | None = None) -> None:
        self.options = options or NativeOptions()
        #: the scaffold ships with agentmeter, so by default its version is agentmeter's
        self.version: str | None = version or agentmeter.__version__

    def layers(self) -> list[LayerSpec]:
        return []  # runs on the host; its tools use only what the task's sandbox has

    async def run(self, ctx: AgentContext) -> AgentRun:
        if ctx.gateway is None:
            return AgentRun(error="the native agent needs a gateway endpoint")
        state = _RunState()
        started = time.monotonic()
        timed_out = False
        deadline = asyncio.timeout(ctx.timeout_s)
        try:
            async with deadline:
                await self._loop(ctx, state)
        except TimeoutError:
            if not deadline.expired():
                state.error = "native agent: unexpected timeout inside the loop"
            else:
                timed_out = True
                state.event("timeout", f"the trial's {ctx.timeout_s:g}s were used up")
        except Exception as e:  # a bug of ours must not take the trial down with it
            state.error = f"native agent failed: {type(e).__name__}: {e}"
            state.event("error", state.error)
        ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.logs_dir / NATIVE_TRANSCRIPT
        path.write_text(json.dumps(state.transcript, indent=1, ensure_ascii=False))
        failed = timed_out or state.error is not None
        return AgentRun(exit_code=None if failed else 0, timed_out=timed_out, error=state.error,
                        command_s=time.monotonic() - started, tool_calls=dict(state.tool_calls),
                        files_read=list(state.files_read), turns=state.turns, self_reported_usage=state.usage,
                        final_message=state.final_message, notes=list(state.notes),
                        artifacts={NATIVE_TRANSCRIPT: (path, "transcript")})

    async def _loop(self, ctx: AgentContext, state: _RunState) -> None:
        assert ctx.gateway is not None
        opts = self.options
        workdir = ctx.task.workdir or ctx.sandbox.workdir
        mcp = None
        if ctx.task.mcp_servers:  # the task's MCP servers (agents/native/mcp.py)
            mcp = McpTools(ctx.sandbox, ctx.task.mcp_servers, workdir,
                           timeout_s=opts.mcp_timeout_s, lifetime_s=ctx.timeout_s + 60)
        tools = ToolBox(ctx.sandbox, workdir, max_output_chars=opts.max_output_chars,
                        shell_timeout_s=opts.shell_timeout_s, search_url=opts.search_url,
                        mcp=mcp)
        try:
            if mcp is not None:
                await mcp.start()
                state.event("mcp", "; ".join(mcp.notes))
                state.notes += mcp.notes
            await self._turns(ctx, state, tools, TOOLS + (mcp.specs if mcp else ()))
        finally:
            if mcp is not None:
                await mcp.close()

    async def _turns(self, ctx: AgentContext, state: _RunState, tools: ToolBox,
                     specs: tuple[ToolSpec, ...]) -> None:
        assert ctx.gateway is not None
        opts = self.options
        workdir = tools.workdir
        meter = ContextMeter(opts.context_window, opts.compact_at)
        session = ctx.session
        earlier = session.state.get("messages") if session is not None else None
        messages = list(earlier) if isinstance(earlier, list) else []
        while messages and messages[-1].role == "assistant" and messages[-1].tool_calls:
            messages.pop()  # cut off mid-call (timeout): its calls have no results
        if session is not None:
            session.continued = bool(messages)
            session.state["messages"] = messages  # the same list: kept as the loop appends
        messages.append(Message("user", ctx.instruction))
        state.record(messages[-1])
        last_system = ""
        http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=opts.request_timeout_s), trust_env=False)
        async with http:
            # the loop runs on the host: use the gateway as the host reaches it
            client = ModelClient(http, opts.host_base_url or ctx.gateway.host_base_url
                                 or ctx.gateway.base_url,
                                 ctx.gateway.token, ctx.gateway.model, opts.wire_api,
                                 max_tokens=opts.max_tokens, temperature=opts.temperature)
            while state.turns < opts.max_turns:
                if ctx.stop.is_set():  # the harness ended the run (its budget ran out)
                    state.error = "budget_exceeded"
                    state.event("stopped", "the harness asked the agent to stop")
                    return
                system = system_prompt(workdir, await tools.read_memory(), tools.memory_path)
                if system != last_system:
                    state.transcript.append({"role": "system", "content": system})
                    last_system = system

                def over(msgs: list[Message], system: str = system) -> bool:
                    return meter.over(client.body(system, msgs, specs))

                if over(messages):
                    messages, notes = compact(messages, opts.keep_recent_turns, over,
                                              summary_chars=max(meter.limit, 500))
                    if ctx.session is not None:
                        ctx.session.state["messages"] = messages
                    state.event("compaction", "; ".join(notes))
                request = client.body(system, messages, specs)
                try:
                    reply = await client.complete(request)
                except ModelError as e:
                    state.error = "budget_exceeded" if e.kind == "budget_exceeded" else str(e)
                    state.event("model_error", str(e))
                    return
                state.turns += 1
                meter.observe(estimate_tokens(request), reply.prompt_tokens)
                if reply.usage is not None:
                    state.usage = reply.usage if state.usage is None else state.usage + reply.usage
                messages.append(reply.message)
                state.record(reply.message, usage=reply.usage.model_dump() if reply.usage
                             else None)
                if not reply.message.tool_calls:
                    state.final_message = reply.message.content
                    return
                finished: str | None = None
                for call in reply.message.tool_calls:
                    state.tool_calls[call.name] += 1
                    if call.name == "read_file" and isinstance(call.arguments.get("path"), str):
                        state.files_read.append(call.arguments["path"])
                    if call.name == FINISH:
                        text = call.arguments.get("message")
                        finished = text if isinstance(text, str) else ""
                        result = "finished"
                    else:
                        result = await tools.run(call)
                    messages.append(Message("tool", result, tool_call_id=call.id, name=call.name))
                    state.record(messages[-1])
                if finished is not None:
                    state.final_message = finished
                    return
            state.event("max_turns", f"stopped after {opts.max_turns} model calls")

"""Options of the native agent (the ``options`` table of an agent config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MESSAGES_DEFAULT_MAX_TOKENS = 8192


class NativeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    wire_api: Literal["chat", "messages"] = Field(
        default="chat", description="Chat Completions or Anthropic Messages")
    max_turns: int = Field(default=50, gt=0, description="model calls before the agent stops")
    context_window: int = Field(default=128_000, gt=0, description="the model's window (tokens)")
    compact_at: float = Field(default=0.75, gt=0, le=1,
                              description="compact above this share of the window")
    keep_recent_turns: int = Field(default=3, ge=1,
                                   description="turns compaction never touches")
    max_output_chars: int = Field(default=10_000, ge=200,
                                  description="tool output beyond this keeps its head and tail")
    shell_timeout_s: float = Field(default=120.0, gt=0,
                                   description="run_shell timeout unless the model asks")
    max_tokens: int | None = Field(
        default=None, gt=0, description="output tokens per model call; unset: the provider's "
        f"default (Messages requires a value: {MESSAGES_DEFAULT_MAX_TOKENS})")
    temperature: float | None = Field(default=None, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0, description="per model call")
    search_url: str = Field(
        default="https://html.duckduckgo.com/html/?q={query}", pattern=r"^https?://.*\{query\}",
        description="web_search's results page ({query} replaced); it and web_fetch go "
        "through the sandbox's egress proxy, so the task's network decides")
    mcp_timeout_s: float = Field(
        default=60.0, gt=0, description="per request to a task's MCP server (initialize, "
        "tools/list, each tool call)")
    host_base_url: str | None = Field(
        default=None, description="gateway URL as seen from the host (overrides the endpoint's)")

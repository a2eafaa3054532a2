"""The scripted offline model: decides with a policy, counts tokens, renders any wire API.

Token counts are deterministic: ceil(characters / 4) of the canonical prompt and of the output.
Prefix caching is simulated per cache key (the trial): the common prefix with the key's previous
prompt is a cache read; of the new part, everything but the newest message is a cache write and
the newest message is uncached input. Chat and Responses report only the read part (as OpenAI
does); Messages reports all three with ``input_tokens`` excluding cached tokens (as Anthropic does);
Gemini reports the read part (``cachedContentTokenCount``) and no thoughts. A Gemini stream is
always SSE (what the gateway asks its upstreams for).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentmeter.gateway.errors import error_bytes
from agentmeter.gateway.neutral import Completion, NeutralUsage, completion_events
from agentmeter.gateway.scripted.conversation import Conversation, read
from agentmeter.gateway.scripted.policy import Policy, decide
from agentmeter.gateway.wire_chat import ChatStreamWriter, completion_body
from agentmeter.gateway.wire_gemini import Framing, GeminiStreamWriter, gemini_body
from agentmeter.gateway.wire_messages import MessagesStreamWriter, message_body
from agentmeter.gateway.wire_responses import ResponsesStreamWriter, response_body
from agentmeter.records import WireApi

SCRIPTED_PREFIX = "scripted/"
_MAX_KEYS = 4096


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix (binary search on C-level slice compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class ScriptedReply:
    status: int
    content_type: str
    chunks: list[bytes] = field(default_factory=list)  # one chunk for a JSON body

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def _validate(api: WireApi, body: dict[str, Any]) -> str | None:
    if api == "gemini":
        return None if isinstance(body.get("contents"), list) else "'contents' must be a list"
    if api == "responses":
        return None if isinstance(body.get("input"), (str, list)) else "'input' is required"
    if not isinstance(body.get("messages"), list):
        return "'messages' must be a list"
    return None


class ScriptedModel:
    """Stateless in its decisions; remembers only each cache key's last prompt (for caching)."""

    def __init__(self) -> None:
        self._previous: OrderedDict[str, str] = OrderedDict()

    def usage(self, conv: Conversation, out: Completion, cache_key: str) -> NeutralUsage:
        prompt = conv.prompt_text
        total = tokens(prompt)
        prev = self._previous.pop(cache_key, "")
        self._previous[cache_key] = prompt
        if len(self._previous) > _MAX_KEYS:
            self._previous.popitem(last=False)
        read_tokens = min(common_prefix(prompt, prev) // 4, total)
        tail = min(tokens(conv.tail_text), total - read_tokens)
        creation = total - read_tokens - tail
        produced = out.text + "".join(t.name + t.arguments for t in out.tool_calls)
        return NeutralUsage(input=total, output=max(tokens(produced), 1), cache_read=read_tokens,
                            cache_creation=creation, reasoning=0)

    def complete(self, policy: Policy, api: WireApi, body: dict[str, Any], *, cache_key: str,
                 solution_script: str | None) -> Completion:
        conv = read(api, body)
        out = decide(policy, conv, solution_script)
        out.usage = self.usage(conv, out, cache_key)
        return out

    def respond(self, policy: Policy, api: WireApi, body: dict[str, Any], *, cache_key: str,
                solution_script: str | None = None, stream: bool | None = None) -> ScriptedReply:
        """``stream``: as the request says when ``None`` (Gemini's says it in its URL)."""
        problem = _validate(api, body)
        if problem is not None:
            return ScriptedReply(400, "application/json", [error_bytes(api, 400, problem)])
        c = self.complete(policy, api, body, cache_key=cache_key, solution_script=solution_script)
        if api == "messages":
            c.usage.reasoning = None  # not in Anthropic's usage shape
        else:
            c.usage.cache_creation = None  # OpenAI APIs do not expose cache writes
        model = SCRIPTED_PREFIX + policy.label
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
        created = int(time.time())
        if stream is None:
            stream = body.get("stream") is True
        if not stream:
            if api == "gemini":
                obj = gemini_body(c, model, digest[:24])
            elif api == "chat":
                obj = completion_body(c, model, f"chatcmpl-{digest[:24]}", created)
            elif api == "responses":
                obj = response_body(c, model, f"resp_{digest[:24]}", created)
            else:
                obj = message_body(c, model, f"msg_{digest[:24]}")
            return ScriptedReply(200, "application/json", [json.dumps(obj).encode()])
        events = completion_events(c)
        chunks: list[bytes]
        if api == "gemini":
            gw = GeminiStreamWriter(model, digest[:24], Framing(sse=True))
            chunks = [gw.start(), *(gw.feed(e) for e in events), gw.end()]
        elif api == "chat":
            opts = body.get("stream_options")
            include = isinstance(opts, dict) and opts.get("include_usage") is True
            cw = ChatStreamWriter(model, f"chatcmpl-{digest[:24]}", created, include)
            chunks = [cw.start(), *(cw.feed(e) for e in events), cw.end()]
        elif api == "responses":
            rw = ResponsesStreamWriter(model, f"resp_{digest[:24]}", created)
            chunks = [rw.start(), *(rw.feed(e) for e in events), rw.end()]
        else:
            mw = MessagesStreamWriter(model, f"msg_{digest[:24]}")
            chunks = [mw.start(c.usage), *(mw.feed(e) for e in events), mw.end()]
        return ScriptedReply(200, "text/event-stream", [ch for ch in chunks if ch])

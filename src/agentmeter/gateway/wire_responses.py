"""OpenAI Responses API on the wire: render completions and the real streaming event sequence."""

from __future__ import annotations

from typing import Any

from agentmeter.gateway import usage as usage_fields
from agentmeter.gateway.neutral import (
    Completion,
    Finish,
    FinishReason,
    NeutralEvent,
    NeutralUsage,
    TextDelta,
    ToolArgsDelta,
    ToolCallStart,
    UsageReport,
)
from agentmeter.gateway.sse import encode


def _response(resp_id: str, model: str, created: int, status: str, output: list[dict[str, Any]],
              usage: NeutralUsage | None, finish: FinishReason | None) -> dict[str, Any]:
    incomplete = {"reason": "max_output_tokens"} if finish == "length" else None
    return {
        "id": resp_id, "object": "response", "created_at": created, "status": status,
        "model": model, "output": output, "error": None, "incomplete_details": incomplete,
        "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": None,
        "top_p": None, "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
        "usage": usage_fields.to_responses(usage) if usage is not None else None,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" \
        else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": content}


def _call_item(item_id: str, call_id: str, name: str, args: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": args, "status": status}


def response_body(c: Completion, model: str, resp_id: str, created: int) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if c.text:
        output.append(_message_item(f"msg_{resp_id}_0", c.text, "completed"))
    for i, t in enumerate(c.tool_calls):
        output.append(_call_item(f"fc_{resp_id}_{i}", t.id, t.name, t.arguments, "completed"))
    status = "incomplete" if c.finish == "length" else "completed"
    return _response(resp_id, model, created, status, output, c.usage, c.finish)


class ResponsesStreamWriter:
    """Neutral events → Responses SSE (``response.created`` … ``response.completed``)."""

    def __init__(self, model: str, resp_id: str, created: int) -> None:
        self._id, self._model, self._created = resp_id, model, created
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._calls: dict[int, int] = {}  # neutral tool index -> output index
        self._finish: FinishReason | None = None
        self._usage: NeutralUsage | None = None

    def _ev(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return encode(payload, kind)

    def start(self) -> bytes:
        snap = _response(self._id, self._model, self._created, "in_progress", [], None, None)
        return self._ev("response.created", response=snap) + self._ev(
            "response.in_progress", response=snap)

    def keepalive(self) -> bytes:
        """A keep-alive that is an event: ``response.in_progress`` again. Codex's stream idle
        timeout (300 s) counts SSE events, and an SSE comment is none."""
        snap = _response(self._id, self._model, self._created, "in_progress", [], None, None)
        return self._ev("response.in_progress", response=snap)

    def _close_open(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        idx = len(self._output)
        if item["type"] == "message":
            done = _message_item(item["id"], item["text"], "completed")
            part = done["content"][0]
            out = self._ev("response.output_text.done", item_id=item["id"], output_index=idx,
                           content_index=0, text=item["text"], logprobs=[])
            out += self._ev("response.content_part.done", item_id=item["id"], output_index=idx,
                            content_index=0, part=part)
        else:
            done = _call_item(item["id"], item["call_id"], item["name"], item["args"], "completed")
            out = self._ev("response.function_call_arguments.done", item_id=item["id"],
                           output_index=idx, name=item["name"], arguments=item["args"])
        self._output.append(done)
        return out + self._ev("response.output_item.done", output_index=idx, item=done)

    def feed(self, ev: NeutralEvent) -> bytes:
        out = b""
        idx = len(self._output)
        if isinstance(ev, TextDelta):
            if self._open is None or self._open["type"] != "message":
                out += self._close_open()
                idx = len(self._output)
                item_id = f"msg_{self._id}_{idx}"
                self._open = {"type": "message", "id": item_id, "text": ""}
                out += self._ev("response.output_item.added", output_index=idx,
                                item=_message_item(item_id, "", "in_progress"))
                out += self._ev("response.content_part.added", item_id=item_id, output_index=idx,
                                content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []})
            assert self._open is not None
            self._open["text"] += ev.text
            out += self._ev("response.output_text.delta", item_id=self._open["id"],
                            output_index=idx, content_index=0, delta=ev.text, logprobs=[])
        elif isinstance(ev, ToolCallStart):
            out += self._close_open()
            idx = len(self._output)
            item_id = f"fc_{self._id}_{idx}"
            self._open = {"type": "function_call", "id": item_id, "call_id": ev.id,
                          "name": ev.name, "args": "", "index": ev.index}
            self._calls[ev.index] = idx
            out += self._ev("response.output_item.added", output_index=idx,
                            item=_call_item(item_id, ev.id, ev.name, "", "in_progress"))
        elif isinstance(ev, ToolArgsDelta):
            if self._open is not None and self._open.get("index") == ev.index:
                self._open["args"] += ev.delta
                out += self._ev("response.function_call_arguments.delta",
                                item_id=self._open["id"], output_index=idx, delta=ev.delta)
        elif isinstance(ev, Finish):
            self._finish = ev.reason
        elif isinstance(ev, UsageReport):
            self._usage = ev.usage
        return out

    def end(self) -> bytes:
        out = self._close_open()
        status = "incomplete" if self._finish == "length" else "completed"
        final = _response(self._id, self._model, self._created, status, self._output,
                          self._usage, self._finish)
        return out + self._ev(f"response.{status}", response=final)

"""Upstreams: real providers over HTTP (with retries) and the in-process scripted model."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agentmeter.gateway import jsonwire
from agentmeter.gateway.errors import error_bytes
from agentmeter.gateway.httpclient import (
    ReadTimeout,
    Reply,
    ReplyTooLarge,
    Target,
    UpstreamClient,
    UpstreamError,
)
from agentmeter.gateway.registry import UpstreamModel
from agentmeter.gateway.scripted.model import ScriptedModel
from agentmeter.gateway.scripted.policy import Policy
from agentmeter.records import WireApi

API_PATHS: dict[WireApi, str] = {
    "chat": "/chat/completions", "responses": "/responses", "messages": "/messages",
    "gemini": "/models/{model}:generateContent",
}
#: Gemini streams: SSE (the model is named in the URL, the key in a header, never the URL)
GEMINI_STREAM_PATH = "/models/{model}:streamGenerateContent?alt=sse"
#: client headers passed on to the upstream (never credentials)
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta", "user-agent")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of 429, 5xx and connection errors; delays double from ``base_delay``."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 60.0
    connect_timeout: float = 30.0
    read_timeout: float = 900.0

    def backoff(self, attempt: int) -> float:
        return float(min(self.base_delay * (2**attempt), self.max_delay))


@dataclass
class UpstreamRequest:
    api: WireApi
    body: dict[str, Any]
    stream: bool
    headers: dict[str, str]
    cache_key: str
    solution_script: str | None = None


async def _no_release() -> None:
    return None


@dataclass
class UpstreamReply:
    status: int
    content_type: str
    body: bytes | None = None  # a complete body (non-stream, or an error)
    chunks: AsyncIterator[bytes] | None = None  # a stream, chunk by chunk
    release: Callable[[], Awaitable[None]] = _no_release
    abort: Callable[[], None] | None = None  # close the stream's connection (stops the server)
    attempts: int = 1
    infra_error: str | None = None  # retries exhausted / upstream unreachable
    unanswered: str | None = None  # sent, no answer within read_timeout (``read_timed_out``)

    @property
    def streaming(self) -> bool:
        return self.chunks is not None


def read_timed_out(e: BaseException) -> bool:
    """The request was sent and its answer did not come within ``read_timeout`` (a connect
    timeout is not: it never reached the provider). Such a call is not retried: the provider
    may be generating (and billing) it still, and each retry would be another unmetered
    generation. It is the call's failure, charged its reservation (``calls.finish_call``); a
    request whose generation outlasts ``read_timeout`` is the agent's (stream it instead)."""
    return isinstance(e, ReadTimeout)


def _unanswered(req: UpstreamRequest, url: str, e: BaseException, attempts: int) -> UpstreamReply:
    """A sent request with no usable answer: a read timeout, or a whole reply beyond
    ``httpclient.MAX_REPLY_BYTES`` (generated, so likely billed: not retried either)."""
    timed_out = read_timed_out(e)
    what = "within the read timeout" if timed_out else "within the reply size limit"
    problem = (f"no answer from {url} {what} after the request was sent "
               f"({type(e).__name__}: {e}): not retried, charged its reservation")
    status = 504 if timed_out else 502
    return UpstreamReply(status, "application/json", body=error_bytes(req.api, status, problem),
                         attempts=attempts, unanswered=problem)


class Upstream(Protocol):
    async def send(self, req: UpstreamRequest) -> UpstreamReply: ...


async def _iterate(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


class ScriptedUpstream:
    """The scripted model, in process. Speaks the APIs its model entry lists."""

    def __init__(self, model: UpstreamModel, engine: ScriptedModel) -> None:
        self.policy = Policy.parse(model.name.split("/", 1)[1])
        self.engine = engine

    async def send(self, req: UpstreamRequest) -> UpstreamReply:
        reply = self.engine.respond(self.policy, req.api, req.body, cache_key=req.cache_key,
                                    solution_script=req.solution_script, stream=req.stream)
        if reply.content_type == "text/event-stream":
            return UpstreamReply(reply.status, reply.content_type, chunks=_iterate(reply.chunks))
        return UpstreamReply(reply.status, reply.content_type, body=reply.body)


def retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")  # names as sent, or lower-case (httpclient.Reply)
    if ms:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


#: header values never forwarded as they are: they would end the header (injection)
_UNSAFE = str.maketrans("", "", "\r\n\0")


class HttpUpstream:
    """A provider endpoint. The real key is injected here, from the host environment."""

    def __init__(self, model: UpstreamModel, key: str | None, client: UpstreamClient,
                 retry: RetryPolicy) -> None:
        self.model, self.key, self.client, self.retry = model, key, client, retry
        self._targets: dict[tuple[WireApi, bool], Target] = {}  # parsed once, not per request

    def _target(self, req: UpstreamRequest) -> Target:
        key = (req.api, req.api == "gemini" and req.stream)
        target = self._targets.get(key)
        if target is None:
            path = GEMINI_STREAM_PATH if key[1] else API_PATHS[req.api]
            target = self._targets[key] = Target.parse(self.model.base_url.rstrip("/") + path.replace(
                "{model}", self.model.model_id))
        return target

    def _headers(self, req: UpstreamRequest) -> dict[str, str]:
        headers = {"Content-Type": "application/json",
                   "Accept": "text/event-stream" if req.stream else "application/json"}
        for name in FORWARDED_HEADERS:
            if name in req.headers:
                headers[name] = req.headers[name].translate(_UNSAFE)
        if req.api == "messages":
            headers.setdefault("anthropic-version", "2023-06-01")
            if self.key:
                headers["x-api-key"] = self.key
        elif req.api == "gemini":
            if self.key:
                headers["x-goog-api-key"] = self.key
        elif self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    def _head(self, target: Target, req: UpstreamRequest, length: int) -> bytes:
        """The request line and headers, ended by a blank line."""
        lines = [f"POST {target.path} HTTP/1.1", f"Host: {target.host_header}",
                 f"Content-Length: {length}", "Accept-Encoding: identity"]
        lines += [f"{name}: {value}" for name, value in self._headers(req).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")

    async def send(self, req: UpstreamRequest) -> UpstreamReply:
        target = self._target(req)
        url = target.url
        data = jsonwire.dumps(req.body)
        head = self._head(target, req, len(data))
        retry = self.retry
        last: UpstreamReply | None = None
        problem = ""
        attempts = retry.max_retries + 1
        for attempt in range(attempts):
            delay = retry.backoff(attempt)
            try:
                resp = await self.client.request(
                    target, head, data, connect_timeout=retry.connect_timeout,
                    read_timeout=retry.read_timeout, stream=req.stream)
            except UpstreamError as e:
                if read_timed_out(e):
                    return _unanswered(req, url, e, attempt + 1)
                problem = f"cannot reach {url}: {type(e).__name__}: {e}"
                last = None
            else:
                ctype = resp.content_type
                if resp.status == 429 or resp.status >= 500:
                    try:
                        body = await resp.read()
                    except UpstreamError:
                        body = b""
                    resp.release()
                    last = UpstreamReply(resp.status, ctype, body=body, attempts=attempt + 1)
                    problem = f"upstream answered {resp.status}"
                    hinted = retry_after(resp.headers)
                    if hinted is not None:
                        delay = min(hinted, retry.max_delay)
                elif resp.status == 200 and req.stream and ctype == "text/event-stream":

                    async def release(r: Reply = resp) -> None:
                        r.release()

                    return UpstreamReply(200, ctype, chunks=resp.chunks(), release=release,
                                         abort=resp.abort, attempts=attempt + 1)
                else:
                    try:
                        body = await resp.read()
                    except UpstreamError as e:
                        resp.release()
                        if read_timed_out(e) or isinstance(e, ReplyTooLarge):
                            return _unanswered(req, url, e, attempt + 1)
                        problem = f"upstream body lost: {type(e).__name__}: {e}"
                        last = None
                        if attempt + 1 < attempts:
                            await asyncio.sleep(delay)
                        continue
                    resp.release()
                    return UpstreamReply(resp.status, ctype, body=body, attempts=attempt + 1)
            if attempt + 1 < attempts:
                await asyncio.sleep(delay)
        error = f"{problem} after {attempts} attempts"
        if last is not None:
            last.infra_error = error
            return last
        return UpstreamReply(502, "application/json",
                             body=error_bytes(req.api, 502, f"upstream unavailable: {problem}"),
                             attempts=attempts, infra_error=error)

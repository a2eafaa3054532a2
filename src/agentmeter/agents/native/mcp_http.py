"""The native agent's MCP transport ``streamable-http`` (mcp_transport.py): each request one
``exec`` of a fixed bash script in the sandbox that writes the HTTP request to the server and
copies its reply back; the host builds the request and parses the reply (JSON or SSE)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agentmeter.agents.native.mcp_transport import (
    MAX_REPLY_BYTES,
    PROTOCOL_VERSION,
    McpError,
    clip,
)
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import AGENT_USER

_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")
#: an HTTP reply up to this size is parsed on every chunk; a bigger one when it has doubled
#: since its last parse, or at most once per PARSE_PAUSE_S (or 10 times the parse's own time)
PARSE_AT_ONCE_BYTES = 4096
PARSE_PAUSE_S = 0.05

#: streamable HTTP: the request on stdin to the server, the reply on stdout (exit 97: no
#: connection). $1 host, $2 port.
HTTP_SCRIPT = 'exec 3<>"/dev/tcp/$1/$2" || exit 97\ncat >&3 || exit 98\nexec cat <&3\n'


@dataclass
class HttpReply:
    status: int
    headers: dict[str, str]
    messages: list[Any]


def _dechunk(data: bytes) -> tuple[bytes, bool]:
    """The decoded body of a chunked transfer so far and whether its last chunk was read."""
    out, pos = bytearray(), 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return bytes(out), False
        try:
            size = int(data[pos:end].split(b";")[0].strip() or b"x", 16)
        except ValueError:
            raise McpError("malformed chunked HTTP reply") from None
        if size == 0:
            return bytes(out), True
        start = end + 2
        if len(data) < start + size:
            out += data[start:]  # a partial chunk: usable for an SSE stream read so far
            return bytes(out), False
        out += data[start:start + size]
        pos = start + size + 2


def _json_messages(text: str) -> list[Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise McpError(f"the server's reply is not JSON: {clip(text, 120)!r}") from None
    return value if isinstance(value, list) else [value]


def _sse_messages(body: str) -> list[Any]:
    """The JSON messages of the complete events of an SSE stream (non-JSON data skipped)."""
    out: list[Any] = []
    for event in body.replace("\r\n", "\n").split("\n\n")[:-1]:
        data = "\n".join(line[5:].removeprefix(" ") for line in event.split("\n")
                         if line.startswith("data:"))
        if data:
            with contextlib.suppress(ValueError):
                out.append(json.loads(data))
    return out


def parse_http(raw: bytes, eof: bool, want_id: int | None) -> HttpReply | None:
    """The reply in ``raw`` once complete (None: read on), or McpError. With ``want_id`` an
    SSE reply is complete as soon as the response of that id is in it."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        if eof:
            raise McpError("the server closed the connection without an HTTP reply"
                           if not raw else "malformed HTTP reply")
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise McpError(f"malformed HTTP status line {clip(lines[0], 80)!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    complete = eof
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, last = _dechunk(body)
        complete = complete or last
    elif headers.get("content-length", "").isdigit():
        length = int(headers["content-length"])
        complete = complete or len(body) >= length
        body = body[:length]
    ctype = headers.get("content-type", "").lower()
    if ctype.startswith("text/event-stream"):
        messages = _sse_messages(body.decode("utf-8", "replace") + ("\n\n" if complete else ""))
        if want_id is not None and _response(messages, want_id) is not None:
            complete = True
        return HttpReply(status, headers, messages) if complete else None
    if not complete:
        return None
    text = body.decode("utf-8", "replace")
    messages = _json_messages(text) if ctype.startswith("application/json") and text.strip() \
        else []
    return HttpReply(status, headers, messages)



def _same_id(got: Any, want: int | None) -> bool:
    return type(got) is int and got == want  # a bool is no id (True == 1)


def _response(messages: Sequence[Any], want_id: int) -> dict[str, Any] | None:
    for m in messages:
        if isinstance(m, dict) and _same_id(m.get("id"), want_id) and "method" not in m:
            return m
    return None


class HttpTransport:
    """Streamable HTTP, each request one exec in the sandbox (module doc)."""

    def __init__(self, sandbox: Sandbox, url: str, workdir: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise McpError(f"{url!r}: only http:// URLs are supported by the native agent "
                           "(the request goes from inside the sandbox, which speaks no TLS)")
        self.sandbox, self.workdir = sandbox, workdir
        self.host = parts.hostname
        try:
            self.port = parts.port or 80
        except ValueError:
            raise McpError(f"{url!r}: bad port") from None
        if not re.fullmatch(r"[A-Za-z0-9._:-]+", self.host):
            raise McpError(f"{url!r}: bad host name")
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not re.fullmatch(r"[\x21-\x7e]+", self.path):
            raise McpError(f"{url!r}: the path must be visible ASCII")
        self.hostport = f"[{self.host}]" if ":" in self.host else self.host
        if parts.port:
            self.hostport += f":{self.port}"
        self.session_id: str | None = None

    def _request_bytes(self, body: bytes) -> bytes:
        head = [f"POST {self.path} HTTP/1.1", f"Host: {self.hostport}",
                "Content-Type: application/json", "Accept: application/json, text/event-stream",
                f"Content-Length: {len(body)}", "Connection: close",
                f"MCP-Protocol-Version: {PROTOCOL_VERSION}", "User-Agent: agentmeter-native"]
        if self.session_id is not None:
            head.append(f"Mcp-Session-Id: {self.session_id}")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body

    async def _post(self, message: dict[str, Any], timeout: float) -> HttpReply:
        want = message["id"] if type(message.get("id")) is int else None
        raw = bytearray()
        done = asyncio.Event()
        problem: list[str] = []
        loop = asyncio.get_running_loop()
        # the reply so far is parsed whole (parse_http): not on every chunk, or a server
        # trickling 1 MB in 100-byte writes costs the runner's loop ~17 s of CPU (quadratic);
        # at once while small or doubled since the last parse, else once the parse's cost has
        # been waited 10 times over (a delayed check: a complete reply is never left unread)
        parsed = {"len": 0, "at": 0.0, "cost": 0.0}
        later: list[asyncio.TimerHandle] = []

        def check() -> None:
            for handle in later:
                handle.cancel()
            later.clear()
            if done.is_set():
                return
            t0 = loop.time()
            try:
                if parse_http(bytes(raw), False, want) is not None:
                    done.set()
            except McpError:
                done.set()
            except Exception:  # noqa: BLE001 - a reply too deep for json: read to its end
                pass
            parsed.update(len=len(raw), at=loop.time(), cost=loop.time() - t0)

        def feed(chunk: bytes) -> None:  # never raises (a raising sink stops the exec's reader)
            if done.is_set():
                return
            if len(raw) + len(chunk) > MAX_REPLY_BYTES:
                problem.append(f"the reply exceeds {MAX_REPLY_BYTES} bytes; it was dropped")
                done.set()
                return
            raw.extend(chunk)
            due = parsed["at"] + max(PARSE_PAUSE_S, 10 * parsed["cost"])
            if len(raw) <= PARSE_AT_ONCE_BYTES or len(raw) >= 2 * parsed["len"] \
                    or loop.time() >= due:
                check()
            elif not later:
                later.append(loop.call_at(due, check))

        body = json.dumps(message, ensure_ascii=False).encode()
        run = asyncio.ensure_future(self.sandbox.exec(
            ["bash", "-c", HTTP_SCRIPT, "bash", self.host, str(self.port)], cwd=self.workdir,
            user=AGENT_USER, stdin=self._request_bytes(body), timeout=timeout + 5,
            output_limit=4096, on_stdout=feed))
        waiter = asyncio.ensure_future(done.wait())
        try:
            await asyncio.wait({run, waiter}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for handle in later:
                handle.cancel()
            waiter.cancel()
            if not run.done():
                run.cancel()
            with contextlib.suppress(BaseException):
                await run
        if problem:
            raise McpError(problem[0])
        finished = run.done() and not run.cancelled() and run.exception() is None
        if finished and not done.is_set():
            r = run.result()
            if r.exit_code == 97:
                raise McpError(f"cannot connect to {self.host}:{self.port} from the sandbox"
                               + (f": {clip(r.stderr.strip())}" if r.stderr.strip() else ""))
            if r.timed_out:
                raise McpError(f"no reply within {timeout:g}s")
        elif not done.is_set():
            if run.done() and not run.cancelled() and run.exception() is not None:
                raise McpError(f"the sandbox could not run the request: {run.exception()}")
            raise McpError(f"no reply within {timeout:g}s")
        reply = parse_http(bytes(raw), True, want)
        assert reply is not None
        return reply

    async def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        reply = await self._post(message, timeout)
        if reply.status >= 400:
            raise McpError(f"HTTP {reply.status} from the server")
        sid = reply.headers.get("mcp-session-id")
        if sid is not None and self.session_id is None and message.get("method") == "initialize":
            if not _SESSION_ID.fullmatch(sid):
                raise McpError("the server's Mcp-Session-Id is not visible ASCII (≤ 256)")
            self.session_id = sid
        found = _response(reply.messages, message["id"])
        if found is None:
            raise McpError("the server's reply holds no response to the request")
        return found

    async def notify(self, message: dict[str, Any], timeout: float) -> None:
        reply = await self._post(message, timeout)
        if reply.status >= 400:
            raise McpError(f"HTTP {reply.status} from the server")

    async def close(self) -> None:
        pass  # nothing is left running: each request was its own exec

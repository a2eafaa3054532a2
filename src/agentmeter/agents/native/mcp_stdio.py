"""The native agent's MCP transport ``stdio`` (mcp_transport.py): the server's command runs in
the sandbox as the agent's user for the whole run, reading a FIFO the harness writes each
request into (one short ``exec`` per message), its stdout streamed back line by line."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

from agentmeter.agents.native.mcp_transport import MAX_REPLY_BYTES, McpError, clip
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import AGENT_USER

#: a server's stderr kept for messages (the exec's own cap)
STDERR_LIMIT = 16_000

#: stdio: a private FIFO (its path the first line of stdout), kept open for writing by the
#: script itself so the server never sees end-of-file between requests; then the server.
STDIO_SCRIPT = ('d=$(mktemp -d) && mkfifo -m 600 "$d/in" || exit 97\n'
                'printf "%s\\n" "$d/in"\nexec 3<>"$d/in"\nexec "$@" <&3 3<&-\n')
FIFO_WRITE = 'exec cat > "$1"'


class StdioTransport:
    """A stdio server run in the sandbox for the whole run (module doc)."""

    def __init__(self, sandbox: Sandbox, command: str, args: Sequence[str], workdir: str,
                 lifetime_s: float) -> None:
        self.sandbox, self.workdir = sandbox, workdir
        self.argv = [command, *args]
        self.lifetime_s = lifetime_s
        self.fifo: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.buf = bytearray()
        self.skipping = False  # inside a line over the cap: dropped up to its newline
        self.broken: str | None = None
        self.replies: set[asyncio.Task[None]] = set()
        self.proc: asyncio.Task[Any] | None = None

    async def start(self, timeout: float) -> None:
        self.proc = asyncio.ensure_future(self.sandbox.exec(
            ["bash", "-c", STDIO_SCRIPT, "bash", *self.argv], cwd=self.workdir, user=AGENT_USER,
            timeout=self.lifetime_s, output_limit=STDERR_LIMIT, on_stdout=self._feed))
        self.proc.add_done_callback(self._ended)
        try:
            await asyncio.wait_for(asyncio.shield(self.fifo), timeout)
        except TimeoutError:
            raise McpError(f"the server did not start within {timeout:g}s") from None

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            why = "the server was stopped"
        elif task.exception() is not None:
            why = f"the sandbox could not run the server: {task.exception()}"
        else:
            r = task.result()
            tail = r.stderr.strip()[-300:]
            why = (f"the server exited (code {r.exit_code})" if not r.timed_out
                   else "the server was stopped at the end of the run") + \
                (f": {tail}" if tail else "")
        self.broken = self.broken or why
        if not self.fifo.done():
            self.fifo.set_exception(McpError(why))
            self.fifo.exception()  # retrieved: no "never retrieved" warning
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(McpError(why))
                fut.exception()

    def _feed(self, chunk: bytes) -> None:  # never raises
        try:
            self._lines(chunk)
        except Exception as e:  # a bug of ours must not stop the reader
            self.broken = self.broken or f"client error: {type(e).__name__}: {e}"

    def _lines(self, chunk: bytes) -> None:
        while chunk:
            nl = chunk.find(b"\n")
            piece, chunk = (chunk, b"") if nl < 0 else (chunk[:nl], chunk[nl + 1:])
            if self.skipping:
                if nl >= 0:
                    self.skipping = False
                continue
            if len(self.buf) + len(piece) > MAX_REPLY_BYTES:
                self.buf.clear()
                self.skipping = nl < 0
                self._fail_oldest(f"a reply line exceeds {MAX_REPLY_BYTES} bytes; it was "
                                  "dropped")
                continue
            self.buf.extend(piece)
            if nl >= 0:
                line = bytes(self.buf)
                self.buf.clear()
                self._line(line)

    def _fail_oldest(self, why: str) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(McpError(why))
                fut.exception()
                return

    def _line(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        if not self.fifo.done():  # the script's own first line
            self.fifo.set_result(text)
            return
        try:
            msg = json.loads(text)
        except ValueError:
            return  # a server logging to stdout: not a message
        if not isinstance(msg, dict):
            return
        mid = msg.get("id")
        if "method" in msg:
            if mid is not None and len(self.replies) < 16:  # a request of the server's
                answer: dict[str, Any] = {"jsonrpc": "2.0", "id": mid}
                if msg.get("method") == "ping":
                    answer["result"] = {}
                else:
                    answer["error"] = {"code": -32601, "message": "not supported by this client"}
                task = asyncio.ensure_future(self._send(answer, 10.0))
                self.replies.add(task)
                task.add_done_callback(self.replies.discard)
            return
        fut = self.pending.get(mid) if type(mid) is int else None
        if fut is not None and not fut.done():
            fut.set_result(msg)

    async def _send(self, message: dict[str, Any], timeout: float) -> None:
        path = await asyncio.shield(self.fifo)
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        r = await self.sandbox.exec(["bash", "-c", FIFO_WRITE, "bash", path], user=AGENT_USER,
                                    cwd=self.workdir, stdin=line, timeout=timeout,
                                    output_limit=4096)
        if r.exit_code != 0:
            raise McpError("could not write to the server"
                           + (" (it does not read)" if r.timed_out else f": {clip(r.stderr)}"))

    async def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.broken:
            raise McpError(self.broken)
        mid = message["id"]
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[mid] = fut
        try:
            async with asyncio.timeout(timeout):
                await self._send(message, timeout)
                return await fut
        except TimeoutError:
            raise McpError(f"no reply within {timeout:g}s") from None
        finally:
            self.pending.pop(mid, None)

    async def notify(self, message: dict[str, Any], timeout: float) -> None:
        if self.broken:
            raise McpError(self.broken)
        await self._send(message, timeout)

    async def close(self) -> None:
        for task in [*self.replies, *([self.proc] if self.proc else [])]:
            task.cancel()
        for task in [*self.replies, *([self.proc] if self.proc else [])]:
            with contextlib.suppress(BaseException):
                await task

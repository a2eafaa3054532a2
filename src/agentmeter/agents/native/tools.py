"""The native agent's tools, run inside the sandbox as the ``agent`` user from the workdir.

``web_search`` and ``web_fetch`` run on the host through the sandbox's egress proxy (web.py). Every
tool returns text for the model; a failure (bad arguments, missing file, non-unique edit,
sandbox trouble) is returned as an ``error: …`` text, never raised.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentmeter.agents.native import web
from agentmeter.agents.native.messages import ToolCall, truncate
from agentmeter.sandbox.accounts import account_of
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import AGENT_USER, ExecResult

if TYPE_CHECKING:
    from agentmeter.agents.native.mcp import McpTools

#: the memory bank of agentmeter's own account (an image USER's is in its HOME: memory_path)
MEMORY_PATH = "/home/agent/.agentmeter-memory.md"
FINISH = "finish"

_STR = {"type": "string"}


def memory_path(sandbox: Sandbox) -> str:
    """The memory bank's path: in the HOME of the account the agent runs as."""
    return f"{account_of(sandbox).home.rstrip('/')}/.agentmeter-memory.md"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    #: the whole JSON schema of the arguments, when given as one (an MCP tool's inputSchema)
    schema: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def parameters(self) -> dict[str, Any]:
        if self.schema is not None:
            return self.schema
        return {"type": "object", "properties": self.properties, "required": list(self.required)}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("run_shell", "Run a bash command in the working directory; returns stdout, stderr "
             "and the exit code.",
             {"command": _STR, "timeout": {"type": "number", "description": "seconds"}},
             ("command",)),
    ToolSpec("read_file", "Read a text file.", {"path": _STR}, ("path",)),
    ToolSpec("write_file", "Create or overwrite a file with the given content.",
             {"path": _STR, "content": _STR}, ("path", "content")),
    ToolSpec("edit_file", "Replace the one exact occurrence of old_string in a file by "
             "new_string (fails if old_string is missing or not unique).",
             {"path": _STR, "old_string": _STR, "new_string": _STR},
             ("path", "old_string", "new_string")),
    ToolSpec("list_dir", "List a directory (ls -la).", {"path": _STR}, ()),
    ToolSpec("search_files", "Search files recursively for an extended regular expression "
             "(grep -rnE); returns matching lines with file and line number.",
             {"pattern": _STR, "path": _STR}, ("pattern",)),
    ToolSpec("update_memory", "Save notes to your memory bank, shown to you at every turn even "
             "after old turns are dropped. mode 'append' (default) or 'replace'.",
             {"content": _STR, "mode": {"type": "string", "enum": ["append", "replace"]}},
             ("content",)),
    ToolSpec("web_search", "Search the web; returns result titles and URLs. Works only when "
             "the task's network allows it (else an error says so).",
             {"query": _STR}, ("query",)),
    ToolSpec("web_fetch", "Fetch a web page (http or https URL) and return it as text. Works "
             "only when the task's network allows it (else an error says so).",
             {"url": _STR}, ("url",)),
    ToolSpec(FINISH, "Finish the task, with a short final message on what you did.",
             {"message": _STR}, ("message",)),
)


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model."""


def _arg(args: dict[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise ToolError(f"argument {key!r} is required and must be a string")
    return value


class ToolBox:
    def __init__(self, sandbox: Sandbox, workdir: str, *, max_output_chars: int,
                 shell_timeout_s: float, search_url: str = web.SEARCH_URL,
                 mcp: McpTools | None = None) -> None:
        self.sandbox, self.workdir = sandbox, workdir
        #: the task's MCP servers' tools (agents/native/mcp.py), if it has any
        self.mcp = mcp
        #: in the agent account's HOME (the image's USER's: root's is /root)
        self.memory_path = memory_path(sandbox)
        self.max_output_chars, self.shell_timeout_s = max_output_chars, shell_timeout_s
        self.search_url = search_url

    async def run(self, call: ToolCall) -> str:
        """The text result of one tool call (errors included)."""
        if call.parse_error is not None:
            return f"error: could not parse the arguments of {call.name}: {call.parse_error}"
        if self.mcp is not None and self.mcp.owns(call.name):
            return truncate(await self.mcp.call(call.name, call.arguments),
                            self.max_output_chars)
        handler = getattr(self, f"_tool_{call.name}", None)
        if handler is None or call.name == FINISH:
            return f"error: unknown tool {call.name!r}"
        try:
            out: str = await handler(call.arguments)
        except ToolError as e:
            out = f"error: {e}"
        except Exception as e:  # sandbox trouble is reported to the model, never raised
            out = f"error: {call.name} failed: {type(e).__name__}: {e}"
        return truncate(out, self.max_output_chars)

    async def _sh(self, script: str, *args: str, stdin: bytes | None = None,
                  timeout: float = 60.0) -> ExecResult:
        """Run a fixed script with its arguments passed as $1, $2…, never interpolated."""
        return await self.sandbox.exec(["bash", "-c", script, "bash", *args], cwd=self.workdir,
                                       user=AGENT_USER, stdin=stdin, timeout=timeout)

    async def read_memory(self) -> str:
        r = await self._sh('cat -- "$1" 2>/dev/null', self.memory_path)
        return truncate(r.stdout, self.max_output_chars) if r.exit_code == 0 else ""

    # -- the tools ----------------------------------------------------------------------------
    async def _tool_run_shell(self, args: dict[str, Any]) -> str:
        command = _arg(args, "command")
        timeout = args.get("timeout")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            timeout = self.shell_timeout_s
        r = await self.sandbox.exec(command, cwd=self.workdir, user=AGENT_USER,
                                    timeout=float(timeout))
        parts = [r.stdout.rstrip("\n")] if r.stdout else []
        if r.stderr:
            parts.append("[stderr]\n" + r.stderr.rstrip("\n"))
        if r.timed_out:
            parts.append(f"[timed out after {timeout:g}s; the command was killed]")
        parts.append(f"[exit code {r.exit_code}]")
        return "\n".join(parts)

    async def _read_text(self, path: str) -> str:
        r = await self._sh('test -f "$1" || { echo "no such file: $1" >&2; exit 1; }; cat -- "$1"',
                           path)
        if r.exit_code != 0:
            raise ToolError(r.stderr.strip() or f"cannot read {path}")
        if r.stdout_truncated:
            raise ToolError(f"{path} is too large; use run_shell (head, sed -n) to read parts")
        return r.stdout

    async def _write_text(self, path: str, content: str) -> None:
        r = await self._sh('mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', path,
                           stdin=content.encode())
        if r.exit_code != 0:
            raise ToolError(r.stderr.strip() or f"cannot write {path}")

    async def _tool_read_file(self, args: dict[str, Any]) -> str:
        return await self._read_text(_arg(args, "path"))

    async def _tool_write_file(self, args: dict[str, Any]) -> str:
        path, content = _arg(args, "path"), _arg(args, "content")
        await self._write_text(path, content)
        return f"wrote {len(content.encode())} bytes to {path}"

    async def _tool_edit_file(self, args: dict[str, Any]) -> str:
        path, old, new = _arg(args, "path"), _arg(args, "old_string"), _arg(args, "new_string")
        if not old:
            raise ToolError("old_string must not be empty")
        text = await self._read_text(path)
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string not found in {path}")
        if count > 1:
            raise ToolError(f"old_string occurs {count} times in {path}; include more "
                            "surrounding lines so it is unique")
        await self._write_text(path, text.replace(old, new, 1))
        return f"edited {path}"

    async def _tool_list_dir(self, args: dict[str, Any]) -> str:
        r = await self._sh('ls -la -- "$1"', _arg(args, "path", "."))
        if r.exit_code != 0:
            raise ToolError(r.stderr.strip())
        return r.stdout

    async def _tool_search_files(self, args: dict[str, Any]) -> str:
        pattern, path = _arg(args, "pattern"), _arg(args, "path", ".")
        r = await self._sh('grep -rnIE -- "$1" "$2"', pattern, path)
        if r.exit_code == 1:
            return "no matches"
        if r.exit_code != 0:
            raise ToolError(r.stderr.strip() or f"grep exited with {r.exit_code}")
        return r.stdout

    async def _tool_update_memory(self, args: dict[str, Any]) -> str:
        content, mode = _arg(args, "content"), _arg(args, "mode", "append")
        if mode not in ("append", "replace"):
            raise ToolError("mode must be 'append' or 'replace'")
        redirect = ">>" if mode == "append" else ">"
        r = await self._sh(f'cat {redirect} "$1"', self.memory_path,
                           stdin=(content.rstrip("\n") + "\n").encode())
        if r.exit_code != 0:
            raise ToolError(r.stderr.strip() or "cannot write the memory bank")
        return f"memory {'updated' if mode == 'append' else 'replaced'}"

    async def _web(self, url: str) -> web.Page:
        """``url`` through the sandbox's egress proxy (agents/native/web.py), or a ToolError
        saying why not."""
        why = web.unavailable(self.sandbox)
        sock = web.proxy_socket(self.sandbox)
        if why is not None or sock is None:
            raise ToolError(why or "no egress proxy")
        try:
            return await asyncio.to_thread(web.fetch, sock, url)
        except web.WebError as e:
            raise ToolError(str(e)) from None

    async def _tool_web_fetch(self, args: dict[str, Any]) -> str:
        url = _arg(args, "url").strip()
        page = await self._web(url)
        if page.status >= 400:
            raise ToolError(f"{page.url}: HTTP {page.status}: {web.page_text(page)[:500]}")
        return f"[{page.status} {page.url}]\n{web.page_text(page)}"

    async def _tool_web_search(self, args: dict[str, Any]) -> str:
        query = _arg(args, "query").strip()
        if not query:
            raise ToolError("query must not be empty")
        page = await self._web(web.search_url(self.search_url, query))
        if page.status >= 400:
            raise ToolError(f"the search page answered HTTP {page.status}")
        results = web.search_results(page)
        if not results:
            return f"no results for {query!r}"
        return "\n".join(f"{n}. {title}\n   {url}" for n, (title, url) in enumerate(results, 1))

"""The native agent's MCP transports: how a JSON-RPC message reaches a server and its reply
comes back (the client, its sessions and the tools: agents/native/mcp.py). This module holds
what both share; each transport has its own: ``mcp_http.py``, ``mcp_stdio.py``.

Every byte to and from a server goes through the sandbox, never from the host into the task's
network (a server is typically a compose sidecar reachable only inside the sandbox, e.g.
``http://mcp-server:8000/mcp``):

- ``streamable-http``: each request is one ``exec`` of a fixed bash script in the sandbox,
  as the agent's user, that opens ``/dev/tcp/HOST/PORT`` (bash's own sockets; nothing is
  installed), writes the HTTP request given on stdin and copies the reply to stdout. The host
  builds the request and parses the reply (JSON or an SSE stream); it stops the exec as soon
  as the reply with the request's id is read. Only ``http://`` URLs (bash speaks no TLS).
- ``stdio``: the server's ``command`` runs in the sandbox as the agent's user for the whole run,
  reading a FIFO the harness writes each request into (one short ``exec`` per message), its
  stdout streamed back to the host line by line.

Replies are untrusted data: one reply is at most ``MAX_REPLY_BYTES`` (the exec is stopped
beyond it) and every request has a time limit.
"""

from __future__ import annotations

from typing import Any, Protocol

PROTOCOL_VERSION = "2025-06-18"
#: one reply (HTTP response or stdio line), in bytes
MAX_REPLY_BYTES = 1_000_000


class McpError(Exception):
    """An MCP request failed; the message is for the model (or the run's notes)."""


def clip(text: str, n: int = 300) -> str:
    return text if len(text) <= n else text[:n] + "…"


class Transport(Protocol):
    async def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]: ...

    async def notify(self, message: dict[str, Any], timeout: float) -> None: ...

    async def close(self) -> None: ...


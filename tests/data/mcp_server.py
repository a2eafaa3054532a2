"""A tiny MCP server for the tests (stdlib only, run inside a sandbox).

``mcp_server.py stdio [MODE]`` or ``mcp_server.py http PORT [MODE]``; MODE ``json`` (default),
``sse`` (replies as an SSE stream, HTTP only), ``huge`` (tools/call answers 3 MB) or ``silent``
(tools/call is never answered). One tool, ``get_secret``; every call is appended to
/tmp/mcp-calls.log as ``NAME ARGUMENTS``.
"""

import http.server
import json
import sys
import time

SECRET = "mcp-secret-4242"
TOOLS = [{"name": "get_secret", "description": "Returns the secret.",
          "inputSchema": {"type": "object", "properties": {"who": {"type": "string"}},
                          "required": ["who"]}}]


def answer(msg, mode):
    """The response to ``msg`` (None for a notification or a request never answered)."""
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {
            "tools": {}}, "serverInfo": {"name": "tiny", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        with open("/tmp/mcp-calls.log", "a") as f:
            f.write(f"{msg['params']['name']} {json.dumps(msg['params']['arguments'])}\n")
        if mode == "silent":
            time.sleep(3600)
        text = "x" * 3_000_000 if mode == "huge" else SECRET
        result = {"content": [{"type": "text", "text": text}]}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": method}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def stdio(mode):
    print("a log line on stdout, not a message", flush=True)
    for line in sys.stdin:
        reply = answer(json.loads(line), mode)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    mode = "json"

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if msg.get("method") != "initialize" and self.headers.get("Mcp-Session-Id") != "s-1":
            self.send_response(400)
            self.end_headers()
            return
        reply = answer(msg, self.mode)
        if reply is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Mcp-Session-Id", "s-1")
        if self.mode == "sse":  # a ping event first, then the response; the stream stays open
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'event: message\ndata: {"jsonrpc":"2.0","method":"ping","id":99}'
                             b"\n\nevent: message\ndata: " + body + b"\n\n")
            self.wfile.flush()
            time.sleep(3600)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        stdio(sys.argv[2] if len(sys.argv) > 2 else "json")
    else:
        Handler.mode = sys.argv[3] if len(sys.argv) > 3 else "json"
        http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()

"""The native agent's web_fetch and web_search (issue 29 item 5): through the sandbox's egress
proxy they reach what the task's network allows (a loopback server listed with
--allow-host-network stands in for the web), and anything else is a tool error the model reads,
never a harness error: an unlisted host, a sandbox with no network."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from agentmeter.agents.native.messages import ToolCall
from agentmeter.agents.native.tools import TOOLS, ToolBox
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxSpec

PAGE = (b"<html><head><title>Ball</title><script>var secret = 'SCRIPT';</script></head>"
        b"<body><h1>Hello</h1><p>The ball &amp; the <b>bat</b>.</p></body></html>")


class Site:
    """The web on the host's loopback: a page, a redirect to it, a search page, hits counted."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                site.hits.append(self.path)
                port = listed_port(self)
                if self.path == "/old":
                    self.send_response(302)
                    self.send_header("Location", "/page.html")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/search?q="):
                    body = (f'<a href="/search?q=next">Next page</a>'
                            f'<a href="/l/?uddg=http%3A%2F%2F127.0.0.1%3A{port}%2Fpage.html">Ball '
                            f'page</a><a href="https://example.org/doc">A doc</a>').encode()
                elif self.path == "/page.html":
                    body = PAGE
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "4")
                    self.end_headers()
                    self.wfile.write(b"gone")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sites() -> Iterator[tuple[Site, Site]]:
    listed, other = Site(), Site()
    yield listed, other
    listed.close()
    other.close()


def listed_port(handler: BaseHTTPRequestHandler) -> int:
    return int(handler.server.server_address[1])  # type: ignore[index]


def call(name: str, **args: str) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=args)


async def test_web_tools_go_through_the_proxy_and_fail_as_tool_errors(
        local_backend: LocalBackend, sites: tuple[Site, Site]) -> None:
    listed, other = sites
    assert {"web_fetch", "web_search"} <= {t.name for t in TOOLS}
    host = f"127.0.0.1:{listed.port}"
    sb = await local_backend.start(SandboxSpec(network="allowlist", allowed_hosts=(host,),
                                               allow_host_network=True, net_extras=True))
    try:
        tools = ToolBox(sb, "/", max_output_chars=5000, shell_timeout_s=30,
                        search_url=f"http://{host}/search?q={{query}}")
        page = await tools.run(call("web_fetch", url=f"http://{host}/old"))  # a redirect
        assert page.startswith(f"[200 http://{host}/page.html]"), page
        assert "Hello" in page and "The ball & the bat." in page and "SCRIPT" not in page
        found = await tools.run(call("web_search", query="ball bat"))
        assert found.splitlines() == ["1. Ball page", f"   http://{host}/page.html",
                                      "2. A doc", "   https://example.org/doc"], found
        missing = await tools.run(call("web_fetch", url=f"http://{host}/nope"))
        assert missing.startswith("error: ") and "HTTP 404" in missing
        # what the task's network does not list: refused by the proxy, told to the model
        for url in (f"http://127.0.0.1:{other.port}/page.html", "https://example.org/",
                    f"http://localhost:{listed.port}/page.html"):
            refused = await tools.run(call("web_fetch", url=url))
            assert refused.startswith("error: ") and "network does not allow" in refused, refused
        bad = await tools.run(call("web_fetch", url="file:///etc/passwd"))
        assert bad.startswith("error: ") and "only absolute http" in bad
    finally:
        await sb.stop()
    assert other.hits == [] and listed.hits == ["/old", "/page.html", "/search?q=ball+bat",
                                                "/nope"]


async def test_without_network_the_web_tools_say_so() -> None:
    class NoNetwork:
        spec = SandboxSpec(network="none")

    tools = ToolBox(cast(Sandbox, cast(Any, NoNetwork())), "/", max_output_chars=2000,
                    shell_timeout_s=5)
    for c in (call("web_fetch", url="https://example.org/"), call("web_search", query="x")):
        out = await tools.run(c)
        assert out.startswith("error: this task has no network"), out


def test_a_server_that_drips_is_cut_off_at_the_fetch_deadline(tmp_path: Path) -> None:
    """A server on an allowed host that sends one byte at a time, each well within the
    per-read timeout, must not hold a worker thread past the fetch's overall deadline: the
    client hangs up (the server sees its writes fail long before it has sent everything)."""
    from agentmeter.agents.native import web

    sock_path = tmp_path / "proxy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    drip = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: y\r\n" % i for i in range(80))
    sent: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        n = 0
        try:
            for byte in drip:  # ~20 s if nobody hangs up
                conn.sendall(bytes([byte]))
                n += 1
                time.sleep(0.02)
        except OSError:
            pass
        finally:
            sent.append(n)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with pytest.raises(web.WebError, match="cut off"):
        web.fetch(sock_path, "http://slow.example/", timeout=0.5)
    t.join(timeout=60)
    server.close()
    assert sent and sent[0] < len(drip) // 2, (sent, len(drip))

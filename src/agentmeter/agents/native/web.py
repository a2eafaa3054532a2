"""The native agent's ``web_fetch`` and ``web_search`` (AgencyBench's scaffold has both).

They go through the sandbox's egress proxy (sandbox/proxy.py), from the host, over the proxy's
Unix socket: the task's network decides, with the same policy as everything the sandbox itself
sends (allowlist, internal addresses refused, ``--allow-host-network``). A sandbox without the
proxy (``network = "none"``, or a network without the harness's proxy) makes every call a
tool error saying so; a refusal by the proxy (403), a failed connection, a time-out, an HTTP
error status are tool errors too: text the model reads, never a harness error.

``http`` URLs are asked of the proxy as absolute URIs; ``https`` ones through a CONNECT tunnel,
TLS checked here against the system's certificate store. Redirects are followed (each hop asked
of the proxy again) up to ``MAX_REDIRECTS``. HTML comes back as text (scripts and styles
dropped); a search is one GET of the search page (``search_url``, ``{query}`` replaced; default:
DuckDuckGo's HTML endpoint) whose result links are listed.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote_plus, urljoin, urlsplit

SEARCH_URL = "https://html.duckduckgo.com/html/?q={query}"
MAX_BYTES = 2_000_000
TIMEOUT_S = 30.0
MAX_REDIRECTS = 5
MAX_RESULTS = 10
USER_AGENT = "agentmeter-native/1 (web_fetch)"
_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
          "article", "header", "footer", "pre", "table", "ul", "ol", "title"}


class WebError(Exception):
    """The fetch failed; the message is for the model."""


@dataclass
class Page:
    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool


def proxy_socket(sandbox: Any) -> Path | None:
    """The host socket of the sandbox's egress proxy, if it has one."""
    proxy = getattr(getattr(sandbox, "network", None), "proxy", None)
    path = getattr(proxy, "socket_path", None)
    return Path(path) if path is not None else None


def unavailable(sandbox: Any) -> str | None:
    """Why the web tools cannot work in this sandbox, or None."""
    if proxy_socket(sandbox) is not None:
        return None
    policy = getattr(getattr(sandbox, "spec", None), "network", "none")
    if policy == "none":
        return ("this task has no network (network = \"none\"): web access is not allowed; "
                "work from what is in the sandbox")
    return (f"web access goes through the harness's egress proxy, and this sandbox (network = "
            f"{policy!r}) has none")


def _open(sock_path: Path, url: str, timeout: float, deadline: float) -> Page:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebError(f"{url!r}: only absolute http:// and https:// URLs")
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    host = parts.hostname
    netloc = host if ":" not in host else f"[{host}]"
    hostport = f"{netloc}:{port}"
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise WebError(f"{url}: no time left (the fetch's {timeout:.0f} s are spent)")
    s: socket.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    # the per-operation timeout does not bound a server that drips a byte at a time: at the
    # deadline a watchdog shuts the connection down (shutdown acts on the socket, so a
    # duplicate descriptor reaches it through the TLS wrapper too) and the blocked read returns
    watch = s.dup()
    watchdog = threading.Timer(remaining, _hang_up, (watch,))
    watchdog.daemon = True
    watchdog.start()
    try:
        s.connect(str(sock_path))
        if https:
            s.sendall(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode())
            tunnel = http.client.HTTPResponse(s, method="CONNECT")
            tunnel.begin()
            if tunnel.status != 200:
                raise WebError(f"the task's network does not allow {hostport}: the harness's "
                               f"egress proxy answered {tunnel.status} {tunnel.reason}")
            s = ssl.create_default_context().wrap_socket(s, server_hostname=host)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        else:
            target = url.split("#", 1)[0]
        s.sendall((f"GET {target} HTTP/1.1\r\nHost: {parts.netloc.rsplit('@', 1)[-1]}\r\n"
                   f"User-Agent: {USER_AGENT}\r\nAccept: text/html,text/plain,*/*\r\n"
                   "Accept-Encoding: identity\r\nConnection: close\r\n\r\n").encode())
        resp = http.client.HTTPResponse(s, method="GET")
        resp.begin()
        body = resp.read(MAX_BYTES + 1)
        location = resp.getheader("Location") or ""
        page = Page(url=url, status=resp.status, content_type=resp.getheader("Content-Type") or "",
                    body=body[:MAX_BYTES], truncated=len(body) > MAX_BYTES)
        if resp.status == 403 and "allowlist" in (resp.reason or "").lower():
            raise WebError(f"the task's network does not allow {hostport}: the harness's "
                           f"egress proxy answered 403 {resp.reason}")
        if location:
            page.url = urljoin(url, location)
        if time.monotonic() >= deadline:
            raise WebError(f"{url}: cut off after {timeout:.0f} s (the server was too slow)")
        return page
    except (OSError, http.client.HTTPException, ValueError) as e:
        if time.monotonic() >= deadline:
            raise WebError(f"{url}: cut off after {timeout:.0f} s (the server was too slow)") \
                from None
        raise WebError(f"{url}: {type(e).__name__}: {e}") from None
    finally:
        watchdog.cancel()
        watch.close()
        s.close()


def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def fetch(sock_path: Path, url: str, timeout: float = TIMEOUT_S) -> Page:
    """GET ``url`` through the proxy at ``sock_path``, following redirects, all of it within
    ``timeout`` seconds."""
    current = url
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        page = _open(sock_path, current, timeout, deadline)
        if page.status in (301, 302, 303, 307, 308) and page.url != current:
            current = page.url
            continue
        page.url = current
        return page
    raise WebError(f"{url}: more than {MAX_REDIRECTS} redirects")


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.links: list[tuple[str, str]] = []
        self._skip = 0
        self._href: str | None = None
        self._anchor: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n")
        if tag == "a":
            self._href, self._anchor = dict(attrs).get("href"), []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK:
            self.parts.append("\n")
        if tag == "a" and self._href is not None:
            self.links.append((self._href, " ".join("".join(self._anchor).split())))
            self._href = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.parts.append(data)
        if self._href is not None:
            self._anchor.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip()


def _decode(page: Page) -> str:
    charset = "utf-8"
    for part in page.content_type.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        if k.lower() == "charset" and v:
            charset = v.strip('"')
    try:
        return page.body.decode(charset, errors="replace")
    except LookupError:
        return page.body.decode("utf-8", errors="replace")


def page_text(page: Page) -> str:
    """The page as text for the model: HTML without markup, text as is, binary by size."""
    kind = page.content_type.split(";")[0].strip().lower()
    if kind and not (kind.startswith("text/") or kind in ("application/json", "application/xml",
                                                          "application/xhtml+xml")):
        return f"({kind}, {len(page.body)} bytes: not text)"
    raw = _decode(page)
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in raw[:500].lower()):
        parser = _Text()
        parser.feed(raw)
        parser.close()
        raw = parser.text()
    return raw + ("\n[truncated: the page is larger]" if page.truncated else "")


def search_results(page: Page) -> list[tuple[str, str]]:
    """(title, url) of the result links of a search page: links off the search host (a
    redirect link's target, ``uddg=``/``url=``/``q=``, taken), in order, without repeats."""
    parser = _Text()
    parser.feed(_decode(page))
    parser.close()
    own = urlsplit(page.url).hostname
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for href, title in parser.links:
        absolute = urljoin(page.url, href)
        parts = urlsplit(absolute)
        if parts.hostname == own:
            query = parse_qs(parts.query)
            target = next((query[k][0] for k in ("uddg", "url", "q") if query.get(k)), "")
            if not target.startswith(("http://", "https://")):
                continue
            absolute = target
        if not absolute.startswith(("http://", "https://")) or absolute in seen or not title:
            continue
        seen.add(absolute)
        out.append((title, absolute))
        if len(out) >= MAX_RESULTS:
            break
    return out


def search_url(template: str, query: str) -> str:
    return template.replace("{query}", quote_plus(query))

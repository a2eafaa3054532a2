"""The harness's HTTP proxy for one sandbox: host allowlists and the package cache.

A sandbox with ``network = "allowlist"`` has no network but its loopback (like ``"none"``); a
sandbox with ``network = "full"`` and ``package_cache`` has pasta / docker's bridge as before.
Both get this proxy: an asyncio HTTP forward proxy on a host Unix socket, exposed inside as
127.0.0.1:``PROXY_PORT`` by the socket bridge (bridge.py), with ``http_proxy``/``https_proxy``
and the PyPI mirror's index URL in the sandbox's environment (``sandbox_env``).

- **Requests**: absolute-URI requests (GET, HEAD, POST, …) and CONNECT tunnels (TLS, never
  opened). Names are resolved here, on the host; the connection goes to the address checked.
- **Policy** (:class:`HostPolicy`): allowlist mode admits only the hosts listed (``name``,
  ``name:port``, ``*.example.com`` = subdomains, ``.example.com`` = the domain and its
  subdomains, IP literals); public mode admits every host. Either way an internal address
  (hostaddr.py: the host's own addresses, loopback, private, link-local, … in any spelling:
  ``127.1``, ``2130706433``, ``[::ffff:127.0.0.1]``) is refused, for a literal host and for
  every address a name resolves to, unless an exact entry names the host and the run allows
  the host network (``--allow-host-network``): ``*``, wildcards and public mode never reach it.
  The proxy runs on the host, and must not hand the sandbox the host's own services. Redirects
  are not followed here: the client's next request is checked like the first.
  A refusal is a ``403`` whose reason names agentmeter's allowlist, and a logged line.
- **What it could not reach** (``blocked``): every host:port it refused or could not resolve or
  connect to, with why (the first ``MAX_BLOCKED``), so a trial that failed after its command
  met a 403/502 can name the host (runner/network.py) rather than the command that followed.
- **Cache** (pkgcache.py): plain-HTTP apt downloads and the PyPI mirror (pypimirror.py). A
  cache hit for a host is served only when the policy admits that host.
- **Bounds**: at most ``MAX_CONNECTIONS`` client connections; headers within
  ``MAX_HEADER_BYTES`` and ``HEADER_TIMEOUT_S``; tunnels and relays end after ``IDLE_TIMEOUT_S``
  without traffic. A malformed request gets a 400; nothing a client sends ends the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from agentmeter.sandbox import pypimirror
from agentmeter.sandbox.hostaddr import internal, names_the_host, parse_ip
from agentmeter.sandbox.hostpolicy import HostPolicy, split_entry
from agentmeter.sandbox.pkgcache import (
    Entry,
    Kind,
    PackageCache,
    Response,
    Sink,
    UpstreamError,
    kind_of,
)

#: the port the proxy appears on inside a sandbox (the gateway's is 18080)
PROXY_PORT = 18081
MAX_CONNECTIONS = 64
MAX_HEADER_BYTES = 64 << 10
HEADER_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 15.0
#: how many distinct hosts ``blocked`` keeps
MAX_BLOCKED = 32
#: the reason phrase of a refusal: clients print it (e.g. "Tunnel connection failed: 403 …")
REFUSED_REASON = "Forbidden by agentmeter allowlist"
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade"}

log = logging.getLogger("agentmeter.proxy")
Resolver = Callable[[str, int], Awaitable[list[str]]]


class Refused(Exception):
    """A request the proxy will not carry: ``status`` and the reason."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=1)  # SOCK_STREAM
    return list(dict.fromkeys(str(i[4][0]) for i in infos))


class _ClientSink(Sink):
    """Streams a download being cached to the client, as a 200."""

    def __init__(self, writer: asyncio.StreamWriter, head: bool) -> None:
        self.writer, self.head, self.started, self.close_after = writer, head, False, False

    async def start(self, headers: dict[str, str], length: int | None) -> None:
        self.started = True
        h = {k: v for k, v in headers.items() if v}
        if length is None:
            self.close_after = True
            h["Connection"] = "close"
        else:
            h["Content-Length"] = str(length)
        await _send_head(self.writer, 200, "OK", h)

    async def write(self, chunk: bytes) -> None:
        if not self.head:
            self.writer.write(chunk)
            await self.writer.drain()


async def _send_head(writer: asyncio.StreamWriter, status: int, reason: str,
                     headers: dict[str, str]) -> None:
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace"))
    await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), IDLE_TIMEOUT_S):
            writer.write(chunk)
            await writer.drain()
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


class SandboxProxy:
    """One sandbox's proxy on a host Unix socket (``socket_path``); ``start``, then ``stop``."""

    def __init__(self, policy: HostPolicy, *, cache: PackageCache | None = None,
                 socket_path: Path | None = None, resolver: Resolver | None = None,
                 port: int = PROXY_PORT) -> None:
        self.policy = policy
        self.cache = cache
        self._dir = None if socket_path else tempfile.mkdtemp(prefix="agentmeter-proxy-")
        self.socket_path = socket_path or Path(self._dir or ".") / "proxy.sock"
        self.resolver = resolver or _resolve
        self.port = port
        #: "host:port" -> why it was not reached (refused by the policy, or unreachable)
        self.blocked: dict[str, str] = {}
        self._hashes: dict[str, str] = {}
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, str(self.socket_path),
                                                       limit=MAX_HEADER_BYTES)
        os.chmod(self.socket_path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for t in list(self._clients):
            t.cancel()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()
        if self._dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)

    def set_policy(self, policy: HostPolicy) -> int:
        """Another phase's policy (a sandbox whose network is switched between phases:
        netsetup.py): every client connection open now (tunnels, relays, kept-alive
        connections admitted under the old policy) is ended, so nothing a process of the earlier
        phase still holds reaches a host the new policy refuses; returns how many were."""
        self.policy = policy
        ended = [t for t in self._clients if t is not asyncio.current_task()]
        for t in ended:
            t.cancel()
        return len(ended)

    def _refuse(self, host: str, port: int, why: str) -> Refused:
        network = self.policy.describe()
        log.warning("proxy refused %s:%s: %s (network %s)", host, port, why, network)
        self._blocked(host, port, f"refused: {why} (network {network})")
        return Refused(403, why)

    def _blocked(self, host: str, port: int, why: str) -> None:
        key = f"{host}:{port}"
        if key not in self.blocked and len(self.blocked) < MAX_BLOCKED:
            self.blocked[key] = why

    def _unreachable(self, host: str, port: int, why: str, e: BaseException | None) -> Refused:
        detail = f"{why}: {e}" if e is not None and str(e) else why
        self._blocked(host, port, f"unreachable: {detail}")
        return Refused(502, detail)

    def _internal_refusal(self, host: str, port: int, addresses: list[str]) -> Refused:
        how = ("an exact entry names it, but this run does not allow the host network "
               "(--allow-host-network)" if self.policy.exact(host, port)
               else "only an exact allowed_hosts entry with --allow-host-network reaches one")
        return self._refuse(host, port, f"{', '.join(addresses) or 'no address'} is the host's own "
                                        f"or an internal address: {how}")

    def check(self, host: str, port: int) -> None:
        """Refuse a host the policy does not admit, or an internal address literal or local name
        (``localhost``) it may not reach (other names are checked once resolved, in ``open``)."""
        if not self.policy.admits(host, port):
            raise self._refuse(host, port, "not in this task's allowed_hosts")
        if names_the_host(host) and not self.policy.may_reach_internal(host, port):
            ip = parse_ip(host)
            raise self._internal_refusal(host, port, [str(ip) if ip else host])

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to an admitted host, at an address checked after resolving it
        (every address a name has is checked; the connection goes to the first, never to a
        second lookup's answer)."""
        self.check(host, port)
        ip = parse_ip(host)
        if ip is not None:
            addresses = [str(ip)]
        else:
            try:
                addresses = await asyncio.wait_for(self.resolver(host, port), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                raise self._unreachable(host, port, f"cannot resolve {host}",
                                        e if str(e) else TimeoutError("timed out")) from e
            if not addresses:
                raise self._unreachable(host, port, f"cannot resolve {host}: no address", None)
            bad = [a for a in addresses if internal(a)]
            if bad and not self.policy.may_reach_internal(host, port):
                raise self._internal_refusal(host, port, bad)
        try:
            return await asyncio.wait_for(asyncio.open_connection(addresses[0], port),
                                          CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise self._unreachable(host, port, f"cannot connect to {host}:{port}",
                                    e if str(e) else TimeoutError("timed out")) from e

    # -- one client connection -------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            if self._slots.locked():
                await _send_head(writer, 503, "Too Many Connections", {"Connection": "close",
                                                                      "Content-Length": "0"})
                return
            async with self._slots:
                while await self._one_request(reader, writer):
                    pass
        except asyncio.CancelledError:  # stop(): the connection ends with the proxy
            pass
        except Exception as e:  # the proxy outlives whatever a client does
            log.debug("proxy client: %r", e)
        finally:
            self._clients.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; True when the connection may carry another."""
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await self._error(writer, 431, "request headers too large")
            return False
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            return False
        try:
            method, target, headers = _parse_head(raw)
        except ValueError as e:
            await self._error(writer, 400, str(e))
            return False
        close = any(k.lower() in ("connection", "proxy-connection") and "close" in v.lower()
                    for k, v in headers) or raw.split(b"\r\n", 1)[0].endswith(b"HTTP/1.0")
        try:
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
                return False
            return await self._http(method, target, headers, reader, writer) and not close
        except Refused as e:
            await self._error(writer, e.status, str(e))
            return False
        except UpstreamError as e:
            await self._error(writer, 502, str(e))
            return False

    async def _error(self, writer: asyncio.StreamWriter, status: int, why: str) -> None:
        reason = {400: "Bad Request", 403: REFUSED_REASON, 404: "Not Found",
                  431: "Request Header Fields Too Large", 502: "Bad Gateway"}.get(status, "Error")
        body = f"agentmeter proxy: {why}\n".encode()
        with contextlib.suppress(Exception):
            await _send_head(writer, status, reason, {"Content-Type": "text/plain",
                                                      "Content-Length": str(len(body)),
                                                      "Connection": "close"})
            writer.write(body)
            await writer.drain()

    async def _tunnel(self, target: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        host, port = split_entry(target)
        if not host or port is None:
            raise Refused(400, f"CONNECT needs host:port, not {target[:100]!r}")
        up_r, up_w = await self.open(host, port)
        try:  # closed also when the tunnel is ended (stop, set_policy)
            await _send_head(writer, 200, "Connection Established", {})
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
        finally:
            up_w.close()

    async def _http(self, method: str, target: str, headers: list[tuple[str, str]],
                    reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if target.startswith("/"):
            return await self._mirror(method, target, headers, writer)
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            raise Refused(400, f"not an absolute http:// URL: {target[:100]!r} (https goes "
                               "through CONNECT)")
        try:
            port = parts.port or 80
        except ValueError:
            raise Refused(400, f"bad port in {target[:100]!r}") from None
        if parts.hostname in ("127.0.0.1", "localhost") and port == self.port:
            return await self._mirror(method, parts.path + (f"?{parts.query}" if parts.query else ""),
                                      headers, writer)
        kind = kind_of(target)
        cacheable = (self.cache is not None and kind is not None and method in ("GET", "HEAD")
                     and not any(k.lower() in ("authorization", "cookie") for k, _ in headers))
        if cacheable:
            assert self.cache is not None and kind is not None
            self.check(parts.hostname, port)
            return await self._cached(target, kind, method == "HEAD", headers, writer)
        await self._forward(method, parts.hostname, port, target, headers, reader, writer)
        return False

    async def _forward(self, method: str, host: str, port: int, target: str,
                       headers: list[tuple[str, str]], reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        """Relay one request as is (origin form, ``Connection: close``) and its answer."""
        up_r, up_w = await self.open(host, port)
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [(k, v) for k, v in headers if k.lower() not in _HOP or k.lower() == "transfer-encoding"]
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in kept), "Connection: close"]
        try:  # closed also when the relay is ended (stop, set_policy)
            up_w.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace"))
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
        finally:
            up_w.close()

    async def _cached(self, url: str, kind: Kind, head: bool, headers: list[tuple[str, str]],
                      writer: asyncio.StreamWriter, *, sha256: str | None = None) -> bool:
        assert self.cache is not None
        sink = _ClientSink(writer, head)
        agent = next((v for k, v in headers if k.lower() == "user-agent"), "agentmeter")
        try:
            got = await self.cache.get(url, kind, self.open, sink, sha256=sha256,
                                       user_agent=agent)
        except UpstreamError:
            if sink.started:  # the answer is cut short: the client sees the connection end
                return False
            raise
        if sink.started:
            return not sink.close_after
        return await _send_result(writer, got, head)

    async def _mirror(self, method: str, path: str, headers: list[tuple[str, str]],
                      writer: asyncio.StreamWriter) -> bool:
        """The PyPI mirror (pypimirror.py): simple pages rewritten, files cached."""
        url = pypimirror.upstream_url(path.partition("?")[0])
        if url is None or method not in ("GET", "HEAD"):
            raise Refused(404, f"{path[:100]!r}: the proxy serves /pypi/simple/ and /pypi/files/")
        if self.cache is None:
            raise Refused(404, "this proxy has no package cache")
        parts = urlsplit(url)
        self.check(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        if path.startswith(pypimirror.FILES):
            return await self._cached(url, "immutable", method == "HEAD", headers, writer,
                                      sha256=self._hashes.get(url))
        got = await self.cache.get(url, "index", self.open)
        if isinstance(got, Response):
            return await _send_result(writer, got, method == "HEAD")
        page = await asyncio.to_thread(got.body.read_bytes)
        body = pypimirror.rewrite_page(page, url, self._hashes)
        await _send_head(writer, 200, "OK", {"Content-Type": "text/html; charset=utf-8",
                                             "Content-Length": str(len(body))})
        if method != "HEAD":
            writer.write(body)
            await writer.drain()
        return True


async def _send_result(writer: asyncio.StreamWriter, got: Entry | Response, head: bool) -> bool:
    if isinstance(got, Response):
        keep = {k.title(): v for k, v in got.headers.items()
                if k in ("content-type", "location", "last-modified", "etag")}
        await _send_head(writer, got.status, got.reason or "Upstream",
                         {**keep, "Content-Length": str(len(got.body)), "Connection": "close"})
        if not head:
            writer.write(got.body)
            await writer.drain()
        return False
    await _send_head(writer, 200, "OK", {**got.headers(), "Content-Length": str(got.size),
                                         "X-Cache": "HIT"})
    if not head:
        with got.body.open("rb") as f:
            while chunk := await asyncio.to_thread(f.read, 1 << 20):
                writer.write(chunk)
                await writer.drain()
    return True


def _parse_head(raw: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise ValueError(f"malformed request line {lines[0][:100]!r}")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"malformed header line {line[:100]!r}")
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], headers


def sandbox_env(port: int = PROXY_PORT) -> dict[str, str]:
    """What a sandbox with the proxy has in its environment."""
    proxy = f"http://127.0.0.1:{port}"
    index = f"{proxy}{pypimirror.SIMPLE}"
    no_proxy = "localhost,127.0.0.1,::1"
    return {"http_proxy": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy,
            "no_proxy": no_proxy, "NO_PROXY": no_proxy, "PIP_INDEX_URL": index,
            "PIP_TRUSTED_HOST": f"127.0.0.1:{port}", "UV_INDEX_URL": index,
            "UV_INSECURE_HOST": f"127.0.0.1:{port}"}

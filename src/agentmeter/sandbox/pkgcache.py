"""The package cache behind the sandbox proxy (proxy.py): apt's plain-HTTP downloads and the
PyPI mirror's pages and files, kept on the host so a second trial downloads nothing.

What is kept (``kind``):

- **immutable**: ``.deb``/``.udeb`` files, anything under ``/by-hash/``, and files the PyPI
  mirror serves (their names carry the version; their hashes are checked where the index gives
  them). Kept until removed.
- **index**: apt's ``dists/`` files (Release, InRelease, Packages, …) and PyPI's simple pages.
  Fresh for ``INDEX_TTL_S``; then revalidated upstream (``If-Modified-Since`` /
  ``If-None-Match``; a 304 makes it fresh again). apt checks the signatures itself.

Everything else passes through uncached. Entries live under ``cache_dir()/packages`` (never
mounted into a sandbox), each a body file and a ``.json`` beside it, both written to a temporary
name and renamed, so a reader sees a whole entry or none; trials and runs share them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from agentmeter.paths import cache_dir, write_atomic

Kind = Literal["immutable", "index"]
#: how long an index stays fresh before it is revalidated upstream (seconds)
INDEX_TTL_S = 600.0
#: the largest file the cache keeps (bigger ones are passed through)
MAX_ENTRY_BYTES = 2 << 30
#: the largest page the mirror rewrites (a PyPI simple page)
MAX_PAGE_BYTES = 64 << 20
UPSTREAM_TIMEOUT_S = 60.0
_INDEX_NAMES = ("Release", "InRelease", "Release.gpg", "Packages", "Sources", "Translation-",
                "Contents-", "Components-", "icons-", "Index")

#: opens a policy-checked TCP connection to (host, port)
Opener = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class UpstreamError(Exception):
    """The upstream could not be reached or answered badly; the message says which."""


def kind_of(url: str) -> Kind | None:
    """How ``url`` (plain HTTP, apt) may be cached, if at all."""
    path = urlsplit(url).path
    name = path.rsplit("/", 1)[-1]
    if "/by-hash/" in path or name.endswith((".deb", ".udeb")):
        return "immutable"
    if "/dists/" in path and name.startswith(_INDEX_NAMES):
        return "index"
    return None


@dataclass
class Entry:
    body: Path
    meta: dict[str, object]

    @property
    def size(self) -> int:
        size = self.meta.get("size", 0)
        return size if isinstance(size, int) else 0

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": str(self.meta.get("content_type") or "application/octet-stream")}
        if self.meta.get("last_modified"):
            h["Last-Modified"] = str(self.meta["last_modified"])
        if self.meta.get("etag"):
            h["ETag"] = str(self.meta["etag"])
        return h


@dataclass
class Response:
    """An upstream answer the cache did not keep (not 200, or not cacheable): relayed as is."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


class Sink:
    """Where a download is streamed while it is cached (the client's connection)."""

    async def start(self, headers: dict[str, str], length: int | None) -> None: ...
    async def write(self, chunk: bytes) -> None: ...


class PackageCache:
    def __init__(self, root: Path | None = None, *, index_ttl_s: float = INDEX_TTL_S) -> None:
        self.root = root or cache_dir() / "packages"
        self.index_ttl_s = index_ttl_s

    def _paths(self, url: str) -> tuple[Path, Path]:
        key = hashlib.sha256(url.encode()).hexdigest()
        d = self.root / key[:2]
        return d / key, d / f"{key}.json"

    def lookup(self, url: str) -> Entry | None:
        body, meta_path = self._paths(url)
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("url") != url or body.stat().st_size != meta.get("size"):
                return None
        except (OSError, ValueError):
            return None
        return Entry(body, meta)

    def fresh(self, entry: Entry, kind: Kind) -> bool:
        stored = entry.meta.get("checked", 0)
        return kind == "immutable" or time.time() - float(stored) < self.index_ttl_s  # type: ignore[arg-type]

    def _write_meta(self, url: str, meta: dict[str, object]) -> None:
        _, meta_path = self._paths(url)
        write_atomic(meta_path, json.dumps(meta).encode(), dir_mode=0o700)

    async def get(self, url: str, kind: Kind, opener: Opener, sink: Sink | None = None, *,
                  sha256: str | None = None, user_agent: str = "agentmeter") -> Entry | Response:
        """The cached entry for ``url``, fetched (and streamed to ``sink``) when missing or
        stale; an upstream answer other than 200 comes back as a :class:`Response`."""
        entry = self.lookup(url)
        if entry is not None and self.fresh(entry, kind):
            return entry
        cond: dict[str, str] = {}
        if entry is not None:
            if entry.meta.get("last_modified"):
                cond["If-Modified-Since"] = str(entry.meta["last_modified"])
            if entry.meta.get("etag"):
                cond["If-None-Match"] = str(entry.meta["etag"])
        reader, writer, status, reason, headers = await _request(
            opener, url, {"User-Agent": user_agent, **cond})
        try:
            if status == 304 and entry is not None:
                entry.meta["checked"] = time.time()
                self._write_meta(url, entry.meta)
                return entry
            if status != 200:
                body = await _read_body(reader, headers, 1 << 20)
                return Response(status, reason, headers, body)
            return await self._store(url, reader, headers, sink, sha256)
        finally:
            writer.close()

    async def _store(self, url: str, reader: asyncio.StreamReader, headers: dict[str, str],
                     sink: Sink | None, sha256: str | None) -> Entry:
        body_path, _ = self._paths(url)
        body_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        length = _length(headers)
        if sink is not None:
            await sink.start({"Content-Type": headers.get("content-type", "")}, length)
        digest, size = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=body_path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in _body_chunks(reader, headers):
                    size += len(chunk)
                    if size > MAX_ENTRY_BYTES:
                        raise UpstreamError(f"{url}: larger than {MAX_ENTRY_BYTES} bytes")
                    digest.update(chunk)
                    out.write(chunk)
                    if sink is not None:
                        await sink.write(chunk)
            if length is not None and size != length:
                raise UpstreamError(f"{url}: {size} of {length} bytes arrived")
            if sha256 is not None and digest.hexdigest() != sha256.lower():
                raise UpstreamError(f"{url}: sha256 {digest.hexdigest()} is not the index's "
                                    f"{sha256}: not cached")
            os.replace(tmp, body_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        meta: dict[str, object] = {
            "url": url, "size": size, "sha256": digest.hexdigest(), "checked": time.time(),
            "content_type": headers.get("content-type"),
            "last_modified": headers.get("last-modified"), "etag": headers.get("etag")}
        self._write_meta(url, meta)
        return Entry(body_path, meta)


async def _request(opener: Opener, url: str, extra: dict[str, str]
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, str, dict[str, str]]:
    """A GET of ``url`` through ``opener`` (TLS for https); the body is left in the reader."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(f"{url}: not an http(s) URL")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    reader, writer = await opener(parts.hostname, port)
    try:
        if tls:  # ssl imported here: an interpreter without it can still run no-TLS sandboxes
            import ssl
            await writer.start_tls(ssl.create_default_context(), server_hostname=parts.hostname)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = {"Host": parts.netloc.rpartition("@")[2], "Accept-Encoding": "identity",
                "Connection": "close", **extra}
        writer.write((f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                      + "\r\n").encode("latin-1"))
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), UPSTREAM_TIMEOUT_S)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as e:
        # (ssl.SSLError is an OSError)
        writer.close()
        raise UpstreamError(f"{parts.hostname}: {e or type(e).__name__}") from e
    lines = raw.decode("latin-1").split("\r\n")
    try:
        _version, code, *reason = lines[0].split(" ", 2)
        status = int(code)
    except ValueError:
        writer.close()
        raise UpstreamError(f"{parts.hostname}: bad status line {lines[0][:100]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return reader, writer, status, reason[0] if reason else "", headers


def _length(headers: dict[str, str]) -> int | None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return None
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]):  # type: ignore[no-untyped-def]
    """The response body: by Content-Length, chunked, or up to the end of the connection."""
    async def read(n: int) -> bytes:
        return await asyncio.wait_for(reader.read(n), UPSTREAM_TIMEOUT_S)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await asyncio.wait_for(reader.readline(), UPSTREAM_TIMEOUT_S)
            try:
                size = int(size_line.split(b";")[0].strip() or b"x", 16)
            except ValueError:
                raise UpstreamError(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                return
            left = size
            while left:
                chunk = await read(min(left, 65536))
                if not chunk:
                    raise UpstreamError("the upstream closed inside a chunk")
                left -= len(chunk)
                yield chunk
            await reader.readline()
    length = _length(headers)
    left = length if length is not None else -1
    while left != 0:
        chunk = await read(65536 if left < 0 else min(left, 65536))
        if not chunk:
            return
        if left > 0:
            left -= len(chunk)
        yield chunk


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], cap: int) -> bytes:
    out = bytearray()
    try:
        async for chunk in _body_chunks(reader, headers):
            out += chunk
            if len(out) >= cap:
                break
    except (OSError, UpstreamError, TimeoutError, asyncio.IncompleteReadError):
        pass
    return bytes(out[:cap])

"""A raw HTTP/1.1 client for attacking a server over TCP or a Unix socket: the bytes go out as
written and the replies are parsed by hand, with no client library's repairs in between."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated one: its last value
    body: bytes

    @property
    def closes(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


class Conn:
    """One connection; ``where`` is a TCP port on 127.0.0.1 or a Unix socket's path."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, where: int | str) -> Conn:
        if isinstance(where, int):
            return cls(*await asyncio.open_connection("127.0.0.1", where))
        return cls(*await asyncio.open_unix_connection(where))

    async def send(self, *parts: bytes) -> bool:
        """Write and drain; ``False`` when the server has closed the connection meanwhile."""
        try:
            self.writer.writelines(parts)
            await self.writer.drain()
        except ConnectionError:
            return False
        return True

    async def trickle(self, data: bytes, every_s: float) -> bool:
        """Send ``data`` a byte at a time; ``False`` as soon as the server has closed."""
        for i in range(len(data)):
            if self.reader.at_eof() or not await self.send(data[i:i + 1]):
                return False
            await asyncio.sleep(every_s)
        return True

    async def reply(self, timeout: float = 5.0) -> Reply | None:
        """The next reply (an interim 1xx too); ``None`` when the connection ends before one."""
        async with asyncio.timeout(timeout):
            try:
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            if status < 200 or status in (204, 304):
                return Reply(status, headers, b"")
            if headers.get("transfer-encoding", "").lower() == "chunked":
                return Reply(status, headers, await self._chunks())
            if "content-length" in headers:
                return Reply(status, headers,
                             await self.reader.readexactly(int(headers["content-length"])))
            return Reply(status, headers, await self.reader.read())

    async def _chunks(self) -> bytes:
        body = b""
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            body += await self.reader.readexactly(size)
            await self.reader.readexactly(2)
        while await self.reader.readline() not in (b"\r\n", b""):  # trailers
            pass
        return body

    async def final(self, timeout: float = 5.0) -> Reply | None:
        """The next final reply (interim 1xx replies skipped)."""
        while (got := await self.reply(timeout)) is not None and got.status < 200:
            pass
        return got

    async def closed(self, timeout: float = 5.0) -> bytes:
        """What the server still sent before it closed (fails with TimeoutError if it stays
        open)."""
        got = b""
        async with asyncio.timeout(timeout):
            with contextlib.suppress(ConnectionError):
                while data := await self.reader.read(65536):
                    got += data
        return got

    def shutdown_write(self) -> None:
        """Half-close: the server reads EOF, this side can still read."""
        sock = self.writer.get_extra_info("socket")
        sock.shutdown(socket.SHUT_WR)

    def reset(self) -> None:
        """Hang up with a RST (no FIN), as a killed client does."""
        sock = self.writer.get_extra_info("socket")
        with contextlib.suppress(OSError):  # already closed
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self) -> None:
        self.writer.close()

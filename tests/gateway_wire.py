"""The gateway under attack over its sockets: a gateway with small limits on TCP and its Unix
socket, two trials, request builders, and what a test checks after an attack."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from polling import eventually_async
from rawhttp import Conn, Reply
from test_gateway import PATHS, request_body

from agentmeter.gateway import Gateway, GatewayLimits, ModelRegistry, UpstreamModel
from agentmeter.pricing import PriceBook

MIB = 1024 * 1024
CHAT = PATHS["chat"]
GOOD = json.dumps(request_body("chat", False)).encode()
STREAM = json.dumps(request_body("chat", True)).encode()
LIMITS = GatewayLimits(max_body_bytes=4096, max_trial_body_bytes=8192, header_timeout_s=1.0,
                       body_timeout_s=1.0, write_timeout_s=1.0, max_connections_per_client=8)
REFUSED = (400, 413, 414, 431)


def request(token: str | None, body: bytes = GOOD, *, extra: str = "", path: str = CHAT,
            version: str = "HTTP/1.1", length: bool = True) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    size = f"Content-Length: {len(body)}\r\n" if length else ""
    return (f"POST {path} {version}\r\nHost: gw\r\n{auth}Content-Type: application/json\r\n"
            f"{size}{extra}\r\n").encode() + (body if length else b"")


def chunked(token: str | None, framed: bytes, extra: str = "") -> bytes:
    return request(token, extra="Transfer-Encoding: chunked\r\n" + extra, length=False) + framed


def frame(body: bytes, size: int = 1024) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@dataclass
class Target:
    gw: Gateway
    where: int | str  # the TCP port or the Unix socket's path
    token: str  # trial "a"'s
    other: str  # trial "b"'s

    async def conn(self) -> Conn:
        return await Conn.open(self.where)

    def calls(self, trial: str = "a") -> int:
        return len(self.gw.trial_meter(trial).calls)

    def held(self) -> tuple[int, int]:
        """(requests, body bytes) trial "a" holds of the gateway now."""
        load = self.gw._trials["a"].load
        return load.requests, load.body_bytes

    async def serves(self) -> None:
        """A well-formed request on a new connection is served and metered once."""
        before = self.calls()
        conn = await self.conn()
        try:
            await conn.send(request(self.token))
            got = await conn.final()
            assert got is not None and got.status == 200, got
            assert json.loads(got.body)["choices"]
        finally:
            conn.close()
        assert self.calls() == before + 1

    async def refuses(self, conn: Conn, statuses: tuple[int, ...] = REFUSED, *,
                      silent_close: bool = False) -> Reply | None:
        """The attack's connection gets one of ``statuses`` (or, with ``silent_close``, no
        reply) and is closed; nothing is metered, nothing held, and the gateway serves on."""
        before = self.calls()
        got = await conn.final()
        if got is None:
            assert silent_close, "closed without a reply"
        else:
            assert got.status in statuses, (got.status, got.body[:200])
        await conn.closed()
        conn.close()
        assert self.calls() == before
        assert await eventually_async(lambda: self.held() == (0, 0), timeout=5)
        await self.serves()
        return got


async def start(limits: GatewayLimits, port: int | None = None) -> Gateway:
    models = ModelRegistry({} if port is None else {"gated/up": UpstreamModel(
        name="gated/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        price_key="scripted/x")})
    gw = Gateway(models, PriceBook(), limits=limits)
    await gw.start(port=0, private_socket=True)
    return gw


def target_of(gw: Gateway, over: str, model: str = "scripted/explorer") -> Target:
    assert gw.port is not None and gw.unix_socket is not None
    return Target(gw, gw.port if over == "tcp" else str(gw.unix_socket),
                  gw.open_trial("a", model), gw.open_trial("b", model))


async def flood(conn: Conn, first: bytes, each: bytes, seconds: float = 3.0) -> int:
    """Send ``first``, then ``each`` over and over (up to 256 MiB, for up to ``seconds``) for as
    long as the server takes them; how many bytes it took."""
    sent = 0
    if not await conn.send(first):
        return sent
    batch = each * max(1, 65536 // len(each))
    try:
        async with asyncio.timeout(seconds):
            while sent < 256 * MIB and await conn.send(batch):
                sent += len(batch)
    except TimeoutError:
        pass  # the writes block: the server stopped reading
    return sent

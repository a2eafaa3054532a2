"""The scripted model served on its own over HTTP (a stand-alone upstream).

Used as an HTTP upstream in tests and as the baseline of the gateway benchmark. The policy comes
from the server's configuration or from the request's model name (``scripted/<policy>``); the
prefix cache is keyed by the caller's API key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from aiohttp import web

from agentmeter.gateway.errors import error_bytes
from agentmeter.gateway.scripted.model import SCRIPTED_PREFIX, ScriptedModel
from agentmeter.gateway.scripted.policy import Policy, PolicyError
from agentmeter.records import WireApi

ROUTES: dict[str, WireApi] = {
    "/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages",
}
#: Gemini: ``POST /v1beta/models/{model}:generateContent`` or ``:streamGenerateContent?alt=sse``
GEMINI_ROUTE = "/v1beta/models/{target}"


@dataclass
class Exchange:
    """One request the stand-alone server answered, exactly as seen on the wire."""

    path: str
    headers: dict[str, str]
    body: bytes
    query: str = ""
    response: bytes = b""
    chunks: list[bytes] = field(default_factory=list)


def make_app(policy: Policy | None = None, solution_script: str | None = None,
             apis: tuple[WireApi, ...] = ("chat", "responses", "messages", "gemini"),
             log: list[Exchange] | None = None) -> web.Application:
    """``log`` (optional) receives every exchange, for tests that check what was sent."""
    model = ScriptedModel()

    async def handle(request: web.Request) -> web.StreamResponse:
        api = ROUTES.get(request.path, "gemini")
        stream: bool | None = None
        if api == "gemini":
            gmodel, _, method = request.match_info["target"].rpartition(":")
            if method not in ("generateContent", "streamGenerateContent"):
                return web.Response(status=404, content_type="application/json",
                                    body=error_bytes(api, 404, f"no method {method!r}"))
            stream = method == "streamGenerateContent"
        raw = await request.read()
        exchange = Exchange(request.path, dict(request.headers), raw, request.query_string)
        if log is not None:
            log.append(exchange)
        if api not in apis:
            return web.Response(status=404, body=error_bytes(api, 404, "not served here"),
                                content_type="application/json")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            return web.Response(status=400, body=error_bytes(api, 400, "malformed JSON body"),
                                content_type="application/json")
        chosen = policy
        if chosen is None:
            name = str(body.get("model") or "") if api != "gemini" else gmodel
            try:
                chosen = Policy.parse(name.removeprefix(SCRIPTED_PREFIX))
            except PolicyError:
                chosen = Policy("quitter")
        key = request.headers.get("authorization") or request.headers.get("x-api-key") or \
            request.headers.get("x-goog-api-key") or ""
        reply = model.respond(chosen, api, body, cache_key=key, solution_script=solution_script,
                              stream=stream)
        exchange.chunks = list(reply.chunks)
        exchange.response = reply.body
        if reply.content_type != "text/event-stream":
            return web.Response(status=reply.status, body=reply.body,
                                content_type=reply.content_type)
        resp = web.StreamResponse(status=reply.status,
                                  headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for chunk in reply.chunks:
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in ROUTES:
        app.router.add_post(path, handle)
    app.router.add_post(GEMINI_ROUTE, handle)
    return app

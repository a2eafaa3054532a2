"""The gateway: an HTTP server (``http``) on a Unix socket and/or TCP, one random token per trial."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentmeter.gateway import bounds, hosted, sockdir, translate
from agentmeter.gateway.bounds import BodyRefused, GatewayLimits
from agentmeter.gateway.call import JSON, Call, CallEnv, settle, worst_case
from agentmeter.gateway.calls import forward, refuse_budget, refuse_request
from agentmeter.gateway.errors import error_bytes
from agentmeter.gateway.http import HttpServer, Router
from agentmeter.gateway.httpclient import UpstreamClient
from agentmeter.gateway.httprequest import Request
from agentmeter.gateway.httpresponse import Response, StreamResponse, json_response
from agentmeter.gateway.localmodels import LocalModelError, LocalServers
from agentmeter.gateway.metering import (
    Budget,
    CallPurpose,
    CallSink,
    ScriptedContext,
    TrialClosed,
    TrialMeter,
    TrialState,
)
from agentmeter.gateway.modelinfo import GEMINI_METHODS, gemini_entry, model_list
from agentmeter.gateway.persist import CallWriter
from agentmeter.gateway.registry import ModelConfigError, ModelRegistry, UpstreamModel
from agentmeter.gateway.scripted.model import ScriptedModel, tokens
from agentmeter.gateway.sse import TooLarge, request_object
from agentmeter.gateway.upstream import HttpUpstream, RetryPolicy, ScriptedUpstream, Upstream
from agentmeter.pricing import PriceBook, UnpricedModelError
from agentmeter.records import WireApi

TOKEN_PREFIX = "am-"
CALL_ROUTES: dict[str, WireApi] = {
    "/v1/chat/completions": "chat", "/chat/completions": "chat",
    "/v1/responses": "responses", "/responses": "responses",
    "/v1/messages": "messages", "/messages": "messages",
}
#: how long ``finish_trial`` waits for calls still reading their upstream (e.g. after the agent
#: hung up mid-stream) before it closes the trial without them (their sink still stores them)
SETTLE_S = 60.0
#: how long ``stop`` waits for calls still under way at the end of a run before it cancels them
#: (each then stored with the error ``call.CANCELLED_BY_HARNESS``)
DRAIN_S = 60.0
#: a stream that sent its client nothing for this long gets a keep-alive (``clientstream.KEEPALIVES``)
KEEPALIVE_S = 15.0


class GatewayError(RuntimeError):
    pass


#: Gemini's paths: ``POST <prefix>/{model}:generateContent`` (and its siblings)
GEMINI_PREFIXES = ("/v1beta/models", "/v1/models")


def _api_of(request: Request) -> WireApi:
    if request.path.startswith(GEMINI_PREFIXES) and request.path.count("/") == 3 or \
            "x-goog-api-key" in request.headers or "key" in request.query:
        return "gemini"
    if "anthropic-version" in request.headers or request.path.rstrip("/").endswith(
            ("/messages", "/count_tokens")) or "x-api-key" in request.headers:
        return "messages"
    return CALL_ROUTES.get(request.path, "chat")


class Gateway:
    """Metering proxy. ``open_trial`` gives a token; ``close_trial`` returns what was metered.
    ``limits``: what a trial or a connecting client may hold of it (``bounds``)."""

    def __init__(self, models: ModelRegistry, prices: PriceBook, *,
                 record_bodies_dir: Path | None = None, retry: RetryPolicy | None = None,
                 allow_unpriced: bool = True, limits: GatewayLimits | None = None) -> None:
        self.models, self.prices = models, prices
        self.limits = limits or GatewayLimits()
        self._gate = bounds.ConnectionGate(self.limits)
        self._servers: list[asyncio.AbstractServer] = []
        self.record_bodies_dir = record_bodies_dir
        self.retry = retry or RetryPolicy()
        self.allow_unpriced = allow_unpriced
        self._trials: dict[str, TrialState] = {}  # by trial id
        self._tokens: dict[str, TrialState] = {}  # by token
        self._upstreams: dict[str, Upstream] = {}
        self._scripted = ScriptedModel()
        self._local = LocalServers()  # local/<model>: llama.cpp servers this gateway started
        self._client: UpstreamClient | None = None  # kept-alive connections to upstreams
        self._http: HttpServer | None = None
        self._writer = CallWriter(lone=lambda: len(self._live) <= 1)
        self._own_socket_dir: Path | None = None
        self.port: int | None = None
        self.unix_socket: Path | None = None
        self.settle_s = SETTLE_S
        self.drain_s = DRAIN_S
        self.keepalive_s = KEEPALIVE_S
        self._live: set[asyncio.Task[Any]] = set()  # handlers of calls under way

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, unix_socket: Path | None = None, host: str | None = None,
                    port: int | None = None, *, private_socket: bool = False) -> None:
        """Listen on a Unix socket and/or TCP (``port=0`` picks a free port: see ``.port``).
        ``private_socket``: the socket in a new private directory (``sockdir``), removed by
        ``stop`` or, after a SIGKILL, by the next gateway that starts."""
        if self._local.servers == {}:  # a gateway started again serves its local models again
            self._local = LocalServers()
        if private_socket:
            self._own_socket_dir = sockdir.make()
            unix_socket = self._own_socket_dir / "gw.sock"
        if unix_socket is None and host is None and port is None:
            host, port = "127.0.0.1", 0
        router = Router(self._fallback)
        for path in CALL_ROUTES:
            router.add("POST", path, self._handle_call)
        for path in ("/v1/messages/count_tokens", "/messages/count_tokens"):
            router.add("POST", path, self._count_tokens)
        for prefix in GEMINI_PREFIXES:
            router.add_prefix("POST", prefix, self._gemini)
        router.add_prefix("GET", "/v1beta/models", self._gemini_model)  # /v1: OpenAI's
        router.add("GET", "/v1beta/models", self._list_models)
        for path in ("/v1/models", "/models"):
            router.add("GET", path, self._list_models)
        self._client = UpstreamClient()
        # a body left unread (a refused request) closes its connection at once (``http``)
        self._http = HttpServer(router, self.limits, self._gate)
        factory = self._http.connection
        loop = asyncio.get_running_loop()
        if unix_socket is not None:
            unix_socket.parent.mkdir(parents=True, exist_ok=True)
            if unix_socket.exists():
                unix_socket.unlink()
            self._servers.append(await loop.create_unix_server(factory, str(unix_socket)))
            self.unix_socket = unix_socket
        if host is not None or port is not None:
            server = await loop.create_server(factory, host or "127.0.0.1", port or 0)
            self._servers.append(server)
            self.port = server.sockets[0].getsockname()[1]

    async def drain(self, wait_s: float | None = None) -> int:
        """End the calls still under way: wait up to ``wait_s`` (default ``drain_s``) for them
        to complete, then cancel the rest; each is metered and handed to its trial's sink with
        its fate (``call.CANCELLED_BY_HARNESS`` for the cancelled). Returns how many were
        cancelled."""
        wait_s = self.drain_s if wait_s is None else wait_s
        live = set(self._live)
        if live and wait_s > 0:
            _, live = await asyncio.wait(live, timeout=wait_s)
        live = {t for t in live if not t.done()}
        for task in live:
            task.cancel()
        if live:  # their handlers record the cancellation (their writes are shielded)
            await asyncio.wait(live, timeout=30)
        return len(live)

    async def stop(self, drain_s: float | None = None) -> None:
        """Stop serving; calls under way are first ended by ``drain`` (``drain_s``)."""
        for server in self._servers:
            server.close()
        await self.drain(drain_s)
        if self._http is not None:
            self._http.close_all()
            self._http = None
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 5)
        self._servers.clear()
        if self._client is not None:
            self._client.close()
            self._client = None
        await self._writer.close()
        self._upstreams.clear()
        await self._local.stop()
        if self.unix_socket is not None and self.unix_socket.exists():
            self.unix_socket.unlink()
        if self._own_socket_dir is not None:
            shutil.rmtree(self._own_socket_dir, ignore_errors=True)
            self._own_socket_dir = None

    @property
    def commits(self) -> tuple[int, int]:
        """(batches, calls) the writer has written so far: calls per commit (``persist``)."""
        return self._writer.batches, self._writer.calls

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise GatewayError("the gateway is not listening on TCP")
        return f"http://127.0.0.1:{self.port}"

    # -- trials ------------------------------------------------------------------------------
    def check_model(self, model: str, *, allow_unpriced: bool | None = None) -> UpstreamModel:
        """Resolve a model and check its key and price before a run (raises a clear error)."""
        um = self.models.resolve(model)
        if um.key_env and not os.environ.get(um.key_env):
            raise ModelConfigError(f"model {model!r}: environment variable {um.key_env} is not set")
        allowed = self.allow_unpriced if allow_unpriced is None else allow_unpriced
        self.prices.require([um.price_key], allow_unpriced=allowed)
        return um

    def open_trial(self, trial_id: str, model: str, *, budget: Budget | None = None,
                   scripted: ScriptedContext | None = None, sink: CallSink | None = None,
                   purpose: CallPurpose = "agent", first_seq: int = 0,
                   hosted_tools: bool = False) -> str:
        """A token for the trial's calls. ``sink`` gets each call record as the call completes,
        on the gateway's writer thread (see ``persist``); ``TrialMeter.stored_seqs`` says which
        it took. ``purpose`` marks the records (a judge's calls are evaluation cost); its calls
        are numbered from ``first_seq`` (a judge's after its trial's agent calls).
        ``hosted_tools``: provider-hosted tools and stored inputs pass (``hosted``; a task with
        the full internet), else they are dropped or refused."""
        if trial_id in self._trials:
            raise GatewayError(f"trial {trial_id!r} is already open")
        um = self.check_model(model)
        budget = budget or Budget()
        priced = um.price_key is not None and self.prices.quote(um.price_key) is not None
        if budget.max_usd is not None and not priced:
            raise UnpricedModelError(f"model {model!r} has no price: cannot enforce max_usd")
        token = TOKEN_PREFIX + secrets.token_urlsafe(24)
        state = TrialState(trial_id, token, um, budget, scripted or ScriptedContext(), priced,
                           sink=sink, purpose=purpose, next_seq=first_seq,
                           hosted_allowed=hosted_tools)
        self._trials[trial_id] = state
        self._tokens[token] = state
        return token

    def trial_meter(self, trial_id: str) -> TrialMeter:
        """What was metered so far (the trial stays open)."""
        return self._trial(trial_id).meter()

    def close_trial(self, trial_id: str) -> TrialMeter:
        """Close now; calls still under way are not in the returned meter (their sink still
        gets them). ``finish_trial`` waits for them."""
        state = self._trial(trial_id)
        del self._trials[trial_id]
        self._tokens.pop(state.token, None)
        state.end()
        return state.meter()

    async def finish_trial(self, trial_id: str, settle_s: float | None = None) -> TrialMeter:
        """Refuse the trial's token, wait (up to ``settle_s``, default ``self.settle_s``) for its
        calls under way to be metered, then close it (those still under way then are in the
        meter's ``calls_in_flight``)."""
        settle_s = self.settle_s if settle_s is None else settle_s
        state = self._trial(trial_id)
        self._tokens.pop(state.token, None)
        state.end()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.idle.wait(), settle_s)
        return self.close_trial(trial_id)

    def _trial(self, trial_id: str) -> TrialState:
        try:
            return self._trials[trial_id]
        except KeyError:
            raise GatewayError(f"no open trial {trial_id!r}") from None

    async def start_local_models(self, models: Iterable[str]) -> None:
        """Start the llama.cpp server of each ``local/`` model among ``models`` now (else on
        its first call), so that a run fails before its trials when one cannot start; the
        servers stop with the gateway. Raises LocalModelError."""
        for name in dict.fromkeys(models):
            um = self.models.resolve(name)
            if um.served_here:
                await self._local.ensure(um.model_id)

    @property
    def local_servers(self) -> LocalServers:
        return self._local

    def _upstream(self, um: UpstreamModel, base_url: str | None = None) -> tuple[Upstream, str | None]:
        """``base_url``: where a local model's server runs now (a restarted one moves)."""
        key = os.environ.get(um.key_env) if um.key_env else None
        cache_key = um.name if base_url is None else f"{um.name} {base_url}"
        up = self._upstreams.get(cache_key)
        if up is None:
            if um.scripted:
                up = ScriptedUpstream(um, self._scripted)
            else:
                if self._client is None:
                    raise GatewayError("the gateway is not started")
                target = um if base_url is None else um.model_copy(update={"base_url": base_url})
                up = HttpUpstream(target, key, self._client, self.retry)
            self._upstreams[cache_key] = up
        return up, key

    # -- HTTP --------------------------------------------------------------------------------
    def _auth(self, request: Request) -> TrialState | None:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        token = token or request.headers.get("x-api-key", "") or request.headers.get("api-key", "")
        token = token or request.headers.get("x-goog-api-key", "") or request.query.get("key", "")
        return self._tokens.get(token) if token else None

    @staticmethod
    def _error(api: WireApi, status: int, message: str, **kw: Any) -> Response:
        return Response(status, error_bytes(api, status, message, **kw), JSON)

    async def _handle_call(self, request: Request) -> Response | StreamResponse:
        return await self._call(request, CALL_ROUTES[request.path])

    async def _gemini(self, request: Request) -> Response | StreamResponse:
        model, _, method = request.match.rpartition(":")
        if method == "countTokens":
            return await self._count_tokens(request, "gemini")
        if not model or method not in GEMINI_METHODS:
            return self._error("gemini", 404, f"no method {method!r} on models/{model} "
                               f"(served: {', '.join(GEMINI_METHODS)})")
        stream = method == "streamGenerateContent"
        return await self._call(request, "gemini", stream=stream,
                                sse=request.query.get("alt") == "sse")

    async def _read(self, request: Request, trial: TrialState, api: WireApi,
                    held: list[int]) -> bytes | Response:
        """The request's body within the limits, or the answer refusing it."""
        try:
            return await bounds.read_body(request, trial.load, self.limits, held)
        except BodyRefused as e:
            refusal = self._error(api, e.status, e.message)
            if e.status == 429:
                refusal.headers["Retry-After"] = "1"
        except ConnectionError:
            refusal = self._error(api, 400, "could not read the request body")
        refusal.close = True  # what is left of the body is never read
        return refusal

    def _too_busy(self, api: WireApi) -> Response:
        resp = self._error(api, 429, f"the trial has {self.limits.max_in_flight} requests in "
                           "flight, the gateway's limit; retry when one has ended")
        resp.headers["Retry-After"] = "1"
        return resp

    async def _call(self, request: Request, client_api: WireApi, *,
                    stream: bool | None = None, sse: bool = True) -> Response | StreamResponse:
        trial = self._auth(request)
        if trial is None:
            return self._error(client_api, 401, "invalid or unknown agentmeter trial token",
                               code="invalid_api_key")
        if not trial.load.enter(self.limits):
            return self._too_busy(client_api)
        held = [0]
        try:
            return await self._bounded_call(request, trial, client_api, held, stream, sse)
        finally:
            bounds.release_body(trial.load, held)
            trial.load.leave()

    async def _bounded_call(self, request: Request, trial: TrialState, client_api: WireApi,
                            held: list[int], stream: bool | None,
                            sse: bool) -> Response | StreamResponse:
        raw = await self._read(request, trial, client_api, held)
        if isinstance(raw, Response):
            return raw
        body = request_object(raw)
        if isinstance(body, str):
            return self._error(client_api, 413 if isinstance(body, TooLarge) else 400, body)
        if not trial.hosted_allowed:  # provider-run tools dropped (``hosted``)
            body, _ = hosted.without_hosted_tools(client_api, body)
        um = trial.model
        upstream_api = translate.upstream_api(client_api, um.wire_apis)
        if upstream_api is None:
            return self._error(client_api, 400, f"model {um.name!r} speaks only {um.wire_api}; "
                               f"translation from {client_api} to it is not supported")
        call = Call(trial, client_api, upstream_api, body, len(raw), stream_route=stream, sse=sse)
        try:
            base_url = (await self._local.ensure(um.model_id)).base_url if um.served_here else None
            upstream, key = self._upstream(um, base_url)
        except (GatewayError, LocalModelError) as e:
            return self._error(client_api, 503, str(e))
        env = CallEnv(self.prices, upstream, key, self.record_bodies_dir, self._writer,
                      self.limits.write_timeout_s, self.keepalive_s)
        trial.begin_call()
        try:
            asked = None if trial.hosted_allowed else (
                hosted.hosted_field(client_api, body) or hosted.remote_input(body))
            if asked is not None:
                return await refuse_request(call, env, hosted.refusal(asked), asked)
            b = trial.budget  # with the internet: remote media, unbounded by the reservation
            if trial.hosted_allowed and (b.max_tokens is not None or b.max_usd is not None) and (
                    fetched := hosted.remote_input(body)) is not None:
                return await refuse_request(call, env, hosted.budget_refusal(fetched), fetched)
            want = worst_case(call, self.prices)
            try:
                reason = await trial.reserve(want)
            except TrialClosed:
                return self._error(client_api, 401, "the agentmeter trial has ended",
                                   code="invalid_api_key")
            if reason is not None:
                return await refuse_budget(call, env, reason)
            call.reservation = want
            task = asyncio.current_task()
            assert task is not None
            self._live.add(task)
            try:
                return await forward(request, call, env)
            finally:
                self._live.discard(task)
        finally:
            settle(call)  # a call never served gives its reservation back
            trial.end_call()

    async def _count_tokens(self, request: Request, api: WireApi = "messages") -> Response:
        """An estimate of a request's input tokens (not metered, not sent upstream)."""
        trial = self._auth(request)
        if trial is None:
            return self._error(api, 401, "invalid or unknown agentmeter trial token")
        if not trial.load.enter(self.limits):
            return self._too_busy(api)
        held = [0]
        try:
            raw = await self._read(request, trial, api, held)
            if isinstance(raw, Response):
                return raw
            body = request_object(raw)
        finally:
            bounds.release_body(trial.load, held)
            trial.load.leave()
        if isinstance(body, str):
            return self._error(api, 413 if isinstance(body, TooLarge) else 400, body)
        from agentmeter.gateway.scripted.conversation import read

        if api == "gemini":  # countTokens takes contents, or a whole generateContentRequest
            inner = body.get("generateContentRequest", body.get("generate_content_request"))
            estimate = tokens(read("gemini", inner if isinstance(inner, dict) else body)
                              .prompt_text)
            return json_response({"totalTokens": max(estimate, 1)})
        estimate = tokens(read("messages", body).prompt_text)
        return json_response({"input_tokens": max(estimate, 1)})

    async def _gemini_model(self, request: Request) -> Response:
        trial = self._auth(request)
        if trial is None:
            return self._error("gemini", 401, "invalid or unknown agentmeter trial token")
        return json_response(gemini_entry(trial.model.name))

    async def _list_models(self, request: Request) -> Response:
        trial = self._auth(request)
        api = "gemini" if request.path.startswith("/v1beta") else _api_of(request)
        if trial is None:
            return self._error(api, 401, "invalid or unknown agentmeter trial token")
        return json_response(model_list(api, trial.model.name))

    async def _fallback(self, request: Request) -> Response:
        if request.path == "/" and request.method in ("GET", "HEAD"):
            return Response(200, b"agentmeter gateway\n", "text/plain; charset=utf-8")
        return self._error(_api_of(request), 404, f"no route {request.method} {request.path}")

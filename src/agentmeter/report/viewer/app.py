"""The local viewer: an aiohttp server over a store showing the same pages as the HTML report,
listing runs, and updating live while a run is in progress (the page polls /api/progress).

Pages and JSON endpoints page through the store in SQL (:mod:`agentmeter.store.browse`: runs,
trials: LIMIT/OFFSET; counts and sums: GROUP BY). A report page scores its runs once per change
of the runs' progress fingerprint; the result is cached. Database work runs in worker threads
so the server stays responsive while a runner writes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import mimetypes
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentmeter.report.html import difftest, report_title
from agentmeter.report.html.collect import ReportData, collect
from agentmeter.report.html.fmt import esc
from agentmeter.report.html.page import main_content, render_page
from agentmeter.report.html.trials import trial_detail, trial_page
from agentmeter.report.viewer import pages
from agentmeter.store import browse
from agentmeter.store.artifacts import artifact_file
from agentmeter.store.browse import TrialQuery
from agentmeter.store.db import Store, StoreError

RUNS_PER_PAGE = 50
TASKS_PER_PAGE = 100
MAX_TRIALS_PER_PAGE = 500
#: characters of one output stream of a case loaded on demand
DIFFTEST_CASE_CHARS = 4000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _int(request: web.Request, name: str, default: int, lo: int = 0,
         hi: int | None = None) -> int:
    raw = request.query.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: not an integer: {raw!r}") from None
    return max(lo, value if hi is None else min(hi, value))


#: the Host names a viewer bound to a loopback address answers to
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def _loopback(host: str) -> bool:
    """A loopback address, or a name only loopback can have (``127.evil.example`` is a name
    its owner may point anywhere: not one)."""
    if host in LOOPBACK_HOSTS or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_guard(bound: str) -> Middleware:
    """A middleware refusing a request whose Host header names another site, while the viewer
    listens on a loopback address: a web page the user visits can point its own name at
    127.0.0.1 (DNS rebinding) and would then read the store through the viewer as a page of
    its own origin."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _loopback(bound) and not _loopback((request.url.host or "").strip("[]").lower()):
            raise web.HTTPMisdirectedRequest(text="this viewer answers to localhost only")
        return await handler(request)

    return guard


def artifact_link(run_id: str, trial_id: str, try_number: int, name: str, path: Path) -> str:
    return "/artifact?" + urlencode({"run": run_id, "trial": trial_id, "try": try_number,
                                     "name": name})


class Viewer:
    def __init__(self, store: Store, interval_ms: int = 2000, cache_size: int = 8,
                 host: str = "127.0.0.1") -> None:
        self.store = store
        self.host = host
        self.interval_ms = interval_ms
        self._cache: OrderedDict[tuple[tuple[str, ...], str], ReportData] = OrderedDict()
        self._cache_size = cache_size
        self._lock = asyncio.Lock()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[host_guard(self.host)])
        app.add_routes([web.get("/", self.index), web.get("/report", self.report),
                        web.get("/api/runs", self.api_runs),
                        web.get("/api/fingerprint", self.api_fingerprint),
                        web.get("/api/progress", self.api_progress),
                        web.get("/api/trials", self.api_trials),
                        web.get("/api/trial", self.api_trial),
                        web.get("/api/difftest_case", self.api_difftest_case),
                        web.get("/artifact", self.artifact)])
        return app

    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def _runs(self, request: web.Request) -> list[str]:
        ids = list(dict.fromkeys(r for r in request.query.getall("run", []) if r))
        if not ids:
            raise web.HTTPBadRequest(text="give at least one run: ?run=RUN_ID")
        return ids

    async def _report_data(self, run_ids: list[str]) -> tuple[ReportData, str]:
        prog = await self._db(browse.progress, self.store, run_ids)
        key = (tuple(run_ids), prog["fingerprint"])
        async with self._lock:
            data = self._cache.get(key)
            if data is None:
                try:
                    data = await self._db(collect, self.store, run_ids)
                except StoreError as e:
                    raise web.HTTPNotFound(text=str(e)) from None
                self._cache[key] = data
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(key)
        return data, prog["fingerprint"]

    # --- pages ---------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        offset = _int(request, "offset", 0)
        total = await self._db(browse.count_runs, self.store)
        rows = await self._db(browse.runs_page, self.store, offset, RUNS_PER_PAGE)
        fp = await self._db(browse.store_fingerprint, self.store)
        html = pages.runs_page(rows, total, offset, RUNS_PER_PAGE, self.store.where, fp,
                               self.interval_ms)
        return web.Response(text=html, content_type="text/html")

    async def report(self, request: web.Request) -> web.Response:
        if not request.query.getall("run", []):
            raise web.HTTPFound("/")
        run_ids = self._runs(request)
        data, fingerprint = await self._report_data(run_ids)
        n_tasks = len(data.task_ids)
        offset = _int(request, "tasks_offset", 0, 0, max(0, n_tasks - 1))
        pager = pages.pager_html(n_tasks, offset, TASKS_PER_PAGE,
                                 lambda o: pages.report_url(run_ids, tasks_offset=o) + "#tasks",
                                 "tasks")
        if request.query.get("fragment") == "main":
            html = main_content(data, offset, TASKS_PER_PAGE, pager)
        else:
            runs_q = urlencode([("run", r) for r in run_ids])
            live = {"progress": f"/api/progress?{runs_q}", "fingerprint": fingerprint,
                    "interval_ms": self.interval_ms,
                    "api": {"trials": "/api/trials", "trial": "/api/trial",
                            "difftest_case": "/api/difftest_case"}}
            html = render_page(data, report_title(run_ids), live=live, task_offset=offset,
                               task_limit=TASKS_PER_PAGE, task_pager=pager,
                               nav_extra='<a href="/">All runs</a>')
        return web.Response(text=html, content_type="text/html")

    # --- JSON ----------------------------------------------------------------------------

    async def api_runs(self, request: web.Request) -> web.Response:
        offset = _int(request, "offset", 0)
        limit = _int(request, "limit", RUNS_PER_PAGE, 1, 500)
        total = await self._db(browse.count_runs, self.store)
        rows = await self._db(browse.runs_page, self.store, offset, limit)
        return web.json_response({"total": total, "runs": [
            {**r.__dict__, "created_at": r.created_at.isoformat(),
             "finished_at": r.finished_at.isoformat() if r.finished_at else None,
             "updated_at": r.updated_at.isoformat() if r.updated_at else None} for r in rows]})

    async def api_fingerprint(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"fingerprint": await self._db(browse.store_fingerprint, self.store)})

    async def api_progress(self, request: web.Request) -> web.Response:
        return web.json_response(await self._db(browse.progress, self.store,
                                                self._runs(request)))

    async def api_trials(self, request: web.Request) -> web.Response:
        q = request.query
        query = TrialQuery(status=q.get("status") or None, config=q.get("config") or None,
                           search=q.get("search") or None, sort=q.get("sort") or "config",
                           desc=q.get("desc") == "1")
        total, rows = await self._db(trial_page, self.store, self._runs(request), query,
                                     _int(request, "offset", 0),
                                     _int(request, "limit", 50, 1, MAX_TRIALS_PER_PAGE))
        return web.json_response({"total": total, "rows": rows})

    async def api_trial(self, request: web.Request) -> web.Response:
        trial_id = request.query.get("id")
        if not trial_id:
            raise web.HTTPBadRequest(text="id: missing")
        try_number = _int(request, "try", -1, -1)
        run_id = await self._db(browse.latest_run_with, self.store, self._runs(request),
                                trial_id)
        detail = None if run_id is None else await self._db(
            trial_detail, self.store, run_id, trial_id,
            None if try_number < 0 else try_number, artifact_link)
        if detail is None:
            raise web.HTTPNotFound(text=f"no trial {trial_id!r}")
        return web.json_response(detail)

    async def api_difftest_case(self, request: web.Request) -> web.Response:
        """One case of a differential test, expanded (HTML, escaped): the drill-down loads a
        case whose output did not fit its budget on demand."""
        q = request.query
        run_id, trial_id, case_id = q.get("run", ""), q.get("trial", ""), q.get("case", "")
        try_number = _int(request, "try", 0)
        path = await self._db(self._artifact_path, run_id, trial_id, try_number,
                              difftest.CASES_ARTIFACT)
        body = None if path is None else await self._db(
            difftest.case_detail, path, case_id, DIFFTEST_CASE_CHARS)
        if body is None:
            raise web.HTTPNotFound(text=f"no case {case_id!r} of trial {trial_id!r}")
        return web.Response(text=body, content_type="text/html")

    def _artifact_path(self, run_id: str, trial_id: str, try_number: int,
                       name: str) -> Path | None:
        rel = browse.artifact_relpath(self.store, run_id, trial_id, try_number, name)
        if rel is None or self.store.runs_dir is None:
            return None
        path = artifact_file(self.store.run_dir(run_id), rel)
        return path if path is not None and path.is_file() else None

    async def artifact(self, request: web.Request) -> web.FileResponse:
        q = request.query
        run_id, trial_id, name = q.get("run", ""), q.get("trial", ""), q.get("name", "")
        try_number = _int(request, "try", 0)
        path = await self._db(self._artifact_path, run_id, trial_id, try_number, name)
        if path is None:
            raise web.HTTPNotFound(text=f"no artifact {name!r} of trial {esc(trial_id)!r}")
        kind = mimetypes.guess_type(path.name)[0]
        # agent-written files: never run as a page of the viewer's origin (an SVG or HTML
        # artifact could carry script); images and videos still display
        headers = {"Content-Security-Policy": "sandbox; default-src 'none'; img-src 'self'; "
                                              "media-src 'self'; style-src 'unsafe-inline'",
                   "X-Content-Type-Options": "nosniff"}
        if not (kind and kind.startswith(("image/", "video/"))):
            headers["Content-Type"] = "text/plain; charset=utf-8"
        return web.FileResponse(path, headers=headers)


@dataclass
class RunningViewer:
    """A viewer serving from a background thread (tests, benchmarks)."""

    url: str
    _loop: asyncio.AbstractEventLoop
    _runner: web.AppRunner
    _thread: threading.Thread

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _start(viewer: Viewer, host: str, port: int) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(viewer.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    return runner, f"http://{host}:{bound[1]}"


def start_in_thread(store: Store, host: str = "127.0.0.1", port: int = 0,
                    interval_ms: int = 2000) -> RunningViewer:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="agentmeter-viewer", daemon=True)
    thread.start()
    runner, url = asyncio.run_coroutine_threadsafe(
        _start(Viewer(store, interval_ms, host=host), host, port), loop).result(30)
    return RunningViewer(url, loop, runner, thread)


async def serve(store: Store, host: str = "127.0.0.1", port: int = 8765,
                announce: Callable[[str], None] = print) -> None:
    """Serve until cancelled (Ctrl-C)."""
    runner, url = await _start(Viewer(store, host=host), host, port)
    announce(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()

"""Browser capture (verify/browser/) with real Chromium in a real evaluation sandbox: state
read through eval-js, clicks, full-page PNGs, WebM video, a page looping forever, a page that
never loads, a page reaching for the network (none), malformed plans."""

from __future__ import annotations

import http.server
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import chromium_fixture  # noqa: F401

from agentmeter.verify.browser import (
    CaptureError,
    CapturePlanError,
    capture,
    load_plan,
    parse_plan,
)

pytestmark = pytest.mark.usefixtures("chromium")

COUNTER = """<!doctype html><html><head><title>Counter</title>
<style>body{margin:0} #board{height:1500px;background:#eef}</style></head><body>
<button id="inc">+1</button> <span id="count">0</span><div id="board"></div>
<script>
let n = 0;
function render() { document.getElementById('count').textContent = String(n); }
window.app = {state: () => ({count: n}), reset: () => { n = 0; render(); }};
document.getElementById('inc').addEventListener('click', () => { n++; render(); });
</script></body></html>"""


def _site(tmp_path: Path, html: str, name: str = "site") -> Path:
    site = tmp_path / name
    site.mkdir()
    (site / "index.html").write_text(html)
    return site


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def test_clicks_change_state_and_media_is_recorded(tmp_path: Path) -> None:
    plan = parse_plan({
        "viewport": [800, 600], "wait_for": "#inc", "video": "play.webm",
        "actions": [
            {"type": "eval-js", "expression": "window.app.state()", "label": "before"},
            {"type": "click", "selector": "#inc", "wait_ms": 50},
            {"type": "click-at", "selector": "#inc", "x_ratio": 0.5, "y_ratio": 0.5, "wait_ms": 50},
            {"type": "click", "selector": "#no-such-button", "timeout_ms": 300},
            {"type": "eval-js", "expression": "window.app.state()", "label": "after"},
            {"type": "eval-js", "expression": "document.getElementById('count').textContent",
             "label": "shown"},
            {"type": "screenshot", "name": "board.png"}]})
    out = tmp_path / "out"
    result = await capture(_site(tmp_path, COUNTER), plan, out, timeout_s=120)

    d = result.diagnostics
    assert d["title"] == "Counter" and d["url"].startswith("http://127.0.0.1:")
    assert "<title>Counter</title>" in d["html_head"]
    assert result.labels == {"before": {"count": 0}, "after": {"count": 2}, "shown": "2"}
    assert not result.timed_out
    # the failing click is recorded and the plan went on
    assert any("action 3 (click)" in e for e in d["errors"]), d["errors"]
    assert result.screenshots == [out / "board.png"]
    width, height = _png_size(out / "board.png")
    assert width == 800 and height > 600  # full page: the 1500 px board is all there
    assert json.loads((out / "capture_diagnostics.json").read_text()) == d
    if result.video is None:  # no ffmpeg here: said so
        assert d["video_note"], d
    else:
        assert result.video == out / "play.webm"
        assert result.video.read_bytes()[:4] == b"\x1a\x45\xdf\xa3"  # EBML (WebM)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["board.png", "capture_diagnostics.json", *(["play.webm"] if result.video else [])])


async def test_a_page_looping_forever_is_cut_at_the_budget(tmp_path: Path) -> None:
    html = COUNTER.replace("n++; render();", "n++; render(); if (n > 1) { while (true) {} }")
    plan = parse_plan({
        "timeout_sec": 15, "video": "v.webm",
        "actions": [
            {"type": "eval-js", "expression": "window.app.state()", "label": "before"},
            {"type": "click", "selector": "#inc", "wait_ms": 0},
            {"type": "click", "selector": "#inc", "wait_ms": 0},
            {"type": "eval-js", "expression": "window.app.state()", "label": "after"},
            {"type": "screenshot", "name": "never.png"}]})
    out = tmp_path / "out"
    result = await capture(_site(tmp_path, html), plan, out, timeout_s=600)
    d = result.diagnostics
    assert result.timed_out
    assert any("timed out: the capture budget of 15 s ran out during action" in e
               for e in d["errors"]), d["errors"]
    assert d["labels"]["before"] == {"count": 0}  # what was seen before the loop is kept
    assert "after" not in d["labels"]
    assert result.screenshots == [] and result.video is None  # no media on a timeout
    assert sorted(p.name for p in out.iterdir()) == ["capture_diagnostics.json"]


async def test_a_page_that_never_loads_is_recorded_not_raised(tmp_path: Path) -> None:
    html = "<!doctype html><html><head><script>while (true) {}</script></head><body>x</body></html>"
    plan = parse_plan({"timeout_sec": 600, "actions": [{"type": "screenshot", "name": "s.png"}]})
    result = await capture(_site(tmp_path, html), plan, tmp_path / "out", timeout_s=12)
    assert result.timed_out
    assert any("ran out during the page load" in e or "ran out during the browser start" in e
               for e in result.diagnostics["errors"]), result.diagnostics["errors"]
    assert result.screenshots == []


async def test_a_missing_page_is_said_at_once_without_a_browser(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "other.html").write_text("<p>not the page</p>")
    plan = parse_plan({"actions": [{"type": "screenshot", "name": "s.png"}]})
    result = await capture(site, plan, tmp_path / "out", timeout_s=60)
    assert result.screenshots == [] and not result.timed_out
    assert result.diagnostics["errors"] == ["index.html is not among the deliverables: nothing "
                                            "to load"]
    assert (tmp_path / "out" / "capture_diagnostics.json").is_file()


def _host_address() -> str:
    """A non-loopback address of this host, else loopback (still outside the sandbox)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            self.wfile.write(b"reached")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


async def test_the_page_cannot_reach_the_network(tmp_path: Path,
                                                 host_server: tuple[int, list[str]]) -> None:
    port, hits = host_server
    targets = [f"http://{_host_address()}:{port}/leak-host", f"http://127.0.0.1:{port}/leak-lo",
               "http://example.com/leak-dns", "http://1.1.1.1/leak-ip"]
    import urllib.request

    with urllib.request.urlopen(targets[0], timeout=10) as r:  # the control: it is reachable
        assert r.read() == b"reached"
    hits.clear()
    # no-cors: any answer at all (an opaque response) counts as reached
    probe = (f"Promise.all({json.dumps(targets)}.map(u => fetch(u, {{mode: 'no-cors', "
             "signal: AbortSignal.timeout(4000)}).then(r => 'reached: ' + r.type)"
             ".catch(e => 'error: ' + e.name)))")
    plan = parse_plan({"actions": [{"type": "eval-js", "expression": probe, "label": "net"}]})
    result = await capture(_site(tmp_path, COUNTER), plan, tmp_path / "out", timeout_s=120)
    outcomes = result.labels["net"]
    assert len(outcomes) == len(targets)
    assert all(o.startswith("error") for o in outcomes), dict(zip(targets, outcomes, strict=True))
    assert hits == []


async def test_harness_faults_raise(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="does not exist"):
        await capture(tmp_path / "missing", parse_plan({}), tmp_path / "out", timeout_s=30)


@pytest.mark.parametrize(("plan", "message"), [
    ('{"actions": [{"type": "click"}]}', "actions[0].selector: Field required"),
    ('{"actions": [{"type": "wait", "ms": 1}, {"type": "hover", "selector": "a"}]}',
     "actions[1]: unknown action type"),
    ('{"actions": [{"selector": "a"}]}', "actions[0]: an action needs a 'type'"),
    ('{"actions": [{"type": "click", "selector": "a", "delay": 3}]}',
     "actions[0].delay: Extra inputs are not permitted"),
    ('{"viewport": [1280]}', "viewport"),
    ('{"viewport": [10, 10]}', "viewport: viewport [10, 10] must be two sizes"),
    ('{"page": "../etc/passwd"}', "page: page '../etc/passwd' must be a path inside"),
    ('{"video": "play.mp4"}', "video: video name 'play.mp4' must end in .webm"),
    ('{"actions": [{"type": "screenshot", "name": "../x.png"}]}', "actions[0].name"),
    ('{"actions": [{"type": "eval-js", "expression": "1", "label": "a"},'
     ' {"type": "eval-js", "expression": "2", "label": "a"}]}', "eval-js label 'a' is used twice"),
    ('{"timeout_sec": "soon"}', "timeout_sec"),
    ('{"pages": "index.html"}', "pages: Extra inputs are not permitted"),
    ('["click"]', "a capture plan is a JSON object"),
    ('{"actions": [', "not valid JSON"),
])
def test_malformed_plans_are_refused_naming_file_and_field(tmp_path: Path, plan: str,
                                                           message: str) -> None:
    path = tmp_path / "tests" / "capture_plan.json"
    path.parent.mkdir()
    path.write_text(plan)
    with pytest.raises(CapturePlanError) as e:
        load_plan(path)
    assert str(e.value).startswith(f"{path}: "), str(e.value)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_plan_in_the_documented_format_loads(tmp_path: Path) -> None:
    path = tmp_path / "capture_plan.json"
    path.write_text(json.dumps({
        "page": "index.html", "viewport": [1280, 1024], "wait_for": ".cell", "timeout_sec": 60,
        "video": "play.webm",
        "actions": [
            {"type": "wait", "ms": 300},
            {"type": "eval-js", "expression": "window.app.state()", "label": "state"},
            {"type": "click", "selector": "#cell-0", "wait_ms": 200},
            {"type": "click-at", "selector": "canvas", "x_ratio": 0.5, "y_ratio": 0.5},
            {"type": "press", "keys": ["ArrowUp", "Enter"], "wait_ms": 200},
            {"type": "type", "selector": "#name", "text": "abc"},
            {"type": "screenshot", "name": "board.png"}]}))
    plan = load_plan(path)
    assert plan.labels == ["state"] and plan.screenshots == ["board.png"]
    assert plan.viewport == (1280, 1024) and plan.video == "play.webm"
    assert load_plan(path) == parse_plan(json.loads(plan.model_dump_json()))

"""AgencyBench in the HTML report and the live viewer: the per-configuration section and one row
per scenario, and a scenario step's drill-down (its rounds with their scores and the feedback
sent, each round's rubric items, the screenshot inline and the video with controls, the judge's
cost), from a real store written through the Store API (tests/agency_fixtures.py). The viewer
serves the media files and nothing outside the run's directory."""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

from agency_fixtures import CONFIG, FEEDBACK, RUN, WEBM, agency_store, png
from browser import browser_fixture, page_fixture  # noqa: F401

from agentmeter.records import ArtifactRecord, RunRecord
from agentmeter.report.html import render_report_html, write_html_report
from agentmeter.report.viewer import start_in_thread
from agentmeter.store.db import Store

FIRST = f"{CONFIG.id}:game-s1.subtask1:0"
SKIPPED = f"{CONFIG.id}:web-s2.subtask2:0"


def _details(page: str) -> dict[str, dict[str, Any]]:
    m = re.search(r'id="am-trials" data-encoding="gzip\+base64">([^<]+)</script>', page)
    assert m, "no embedded trials"
    data = json.loads(gzip.decompress(base64.b64decode(m.group(1))))
    return {d["id"]: d for d in data["details"]}


def _cells(table_html: str, attrs: str) -> list[str]:
    row = re.search(rf"<tr {attrs}>(.*?)</tr>", table_html, re.S)
    assert row, attrs
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                     row.group(1), re.S)]


def _check_section(page: str) -> None:
    m = re.search(r'<section id="agency">(.*?)</section>', page, re.S)
    assert m, "no AgencyBench section"
    sec = m.group(1)
    main = _cells(sec, f'data-config="{CONFIG.id}"')
    # configuration, scenarios, tasks, S_avg, Att, Pass@1/2 scen., Rise, Pass@1/2 tasks, Rise,
    # Avg(1), Avg(2), Tok (M), T (h), E_att, E_tok, skipped (figures: test_metrics_agency_...)
    assert main[1:] == ["2", "5", "56.0", "1.50", "50.0%", "50.0%", "+0.0%", "40.0%", "60.0%",
                        "+50.0%", "50.0", "56.0", "0.0023", "0.96", "37.3", "2.43e+04", "1"]
    game = _cells(sec, f'data-config="{CONFIG.id}" data-scenario="game-s1"')
    web = _cells(sec, f'data-config="{CONFIG.id}" data-scenario="web-s2"')
    assert game[1:] == ["game-s1", "game", "3", "76.7", "1.33", "3/3", "4", "yes", "yes", "0.92"]
    assert web[1:] == ["web-s2", "frontend", "2 (1 skipped)", "25.0", "2.00", "0/2", "2", "no",
                       "no", "1.00"]
    assert "scenario pass rule <b>mean</b>, an inference" in sec


def _check_drill(frag: str) -> tuple[str, str]:
    """The rounds, rubric, media and judge of subtask1; returns the (image src, video src)."""
    rounds = dict(re.findall(r'<tr data-round="(\d)"><td class="num">\d</td>'
                             r'<td class="num">([^<]+)</td>', frag))
    assert rounds == {"1": "4.0", "2": "7.0"}
    assert _cells(frag, 'data-round="1"')[2:] == ["1/2", "–"]
    # the feedback sent before round 2, escaped (it quotes markup)
    assert f"<pre>{html.escape(FEEDBACK)}</pre>" in frag and "<div id=board>" not in frag
    assert _cells(frag, 'data-round="2"')[2] == "2/2"
    r1 = re.search(r'<table class="small rubric" data-round="1">(.*?)</table>', frag, re.S)
    r2 = re.search(r'<table class="small rubric" data-round="2">(.*?)</table>', frag, re.S)
    assert r1 and r2
    assert _cells(r1.group(1), 'class="no" data-item="board"') == [
        "board", "A 3×3 board is rendered", "✗", "4 cells <b>found</b>", "capture"]
    assert "4 cells &lt;b&gt;found&lt;/b&gt;" in r1.group(1)
    assert _cells(r2.group(1), 'class="ok" data-item="board"')[2:4] == ["✓", "9 cells"]
    assert "scripted/judge · 2 call(s) · $0.013 (evaluation cost, not the agent&#x27;s)" in frag
    assert "<dt>scenario</dt><dd>game-s1</dd>" in frag and "<dt>step</dt><dd>1</dd>" in frag
    img = re.search(r'<div class="media" data-round="2">.*?<img class="shot" alt="rounds/2/'
                    r'board.png" loading="lazy" src="([^"]+)">', frag, re.S)
    video = re.search(r'<video class="shot" controls preload="metadata" src="([^"]+)">', frag)
    assert img and video
    return html.unescape(img.group(1)), html.unescape(video.group(1))


def test_static_report(tmp_path: Path) -> None:
    with agency_store(tmp_path / "store") as store:
        target = write_html_report(store, [RUN], tmp_path / "out" / "report.html")
    page = target.read_text()
    _check_section(page)
    assert '<a href="#agency">AgencyBench</a>' in page
    details = _details(page)
    d = details[FIRST]
    img, video = _check_drill(d["agency"])
    # the screenshot is embedded (the report works offline), the video linked next to it
    assert img == "data:image/png;base64," + base64.b64encode(png()).decode()
    assert (target.parent / unquote(video)).read_bytes() == WEBM
    # copied beside the report: the report and report_media/ move together, away from the store
    assert unquote(video).startswith("report_media/") and not video.startswith("..")
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(target, moved / "report.html")
    shutil.move(target.parent / "report_media", moved / "report_media")
    shutil.rmtree(tmp_path / "store")
    assert (moved / unquote(video)).read_bytes() == WEBM
    shown = {a["name"]: a for a in d["artifacts"]}
    for name in ("rounds/2/board.png", "rounds/2/play.webm"):  # not embedded a second time
        assert shown[name]["shown"] == "AgencyBench rounds" and "data" not in shown[name]
    assert "skipped</dt><dd>yes: its scenario halted" in details[SKIPPED]["agency"]
    # a run without scenario trials has no such section
    with Store.open(tmp_path / "plain") as plain:
        plain.create_run(RunRecord(id="plain"))
        assert '<section id="agency">' not in render_report_html(plain, ["plain"])


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), ""


def test_viewer(tmp_path: Path) -> None:
    with agency_store(tmp_path) as store:
        # an artifact record pointing out of the run's directory is never served
        store.add_artifact(RUN, ArtifactRecord(trial_id=FIRST, name="escape.png",
                                               kind="screenshot", relpath="../../agentmeter.db",
                                               size=10))
        viewer = start_in_thread(store)
        try:
            status, body, _ = _get(f"{viewer.url}/report?run={RUN}")
            assert status == 200
            _check_section(body.decode())
            status, body, _ = _get(f"{viewer.url}/api/trial?" + urlencode({"run": RUN,
                                                                           "id": FIRST}))
            assert status == 200
            img, video = _check_drill(json.loads(body)["agency"])
            assert img.startswith("/artifact?") and video.startswith("/artifact?")
            status, body, ctype = _get(viewer.url + img)
            assert (status, body, ctype) == (200, png(), "image/png")
            status, body, ctype = _get(viewer.url + video)
            assert (status, body, ctype) == (200, WEBM, "video/webm")
            for name in ("escape.png", "../../agentmeter.db", "rounds/../../../agentmeter.db"):
                q = urlencode({"run": RUN, "trial": FIRST, "try": 0, "name": name})
                status, body, _ = _get(f"{viewer.url}/artifact?{q}")
                assert status == 404 and b"SQLite" not in body, name
        finally:
            viewer.stop()


def _media_shown(page: Any) -> None:
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    page.wait_for_selector("#drill:not([hidden]) .agency")
    drill = page.locator("#drill .agency")
    img = drill.locator("img.shot")
    img.scroll_into_view_if_needed()
    page.wait_for_function("document.querySelector('#drill .agency img.shot').complete")
    assert img.evaluate("e => [e.naturalWidth, e.naturalHeight]") == [3, 2]  # decoded
    assert drill.locator("video.shot").evaluate("e => e.controls") is True
    assert drill.locator("table.rubric").count() == 2
    assert drill.locator("pre").first.inner_text() == FEEDBACK  # shown as text
    assert page.evaluate("document.querySelectorAll('#drill div#board').length") == 0


def test_drill_down_in_browser(page: Any, tmp_path: Path, artifacts_dir: Path) -> None:
    with agency_store(tmp_path / "store") as store:
        target = write_html_report(store, [RUN], tmp_path / "out" / "report.html")
        page.goto(target.as_uri() + "#trial=" + FIRST)
        _media_shown(page)
        page.screenshot(path=str(artifacts_dir / "report-agency-drilldown.png"))
        viewer = start_in_thread(store)
        try:
            page.goto(f"{viewer.url}/report?run={RUN}#trial={FIRST}")
            _media_shown(page)
            assert page.locator("#agency-scenarios tbody tr").count() == 2
        finally:
            viewer.stop()
    assert page.errors == []

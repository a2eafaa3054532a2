"""A CLI-generation trial's differential test in the HTML report's drill-down and in the viewer.

One real trial (the difftest kind, the oracle agent installing a restyled candidate, the real
runner in a real sandbox, the scripted judge as the test double): the per-class table, the
entry-point diagnostic, the judge's cost and every case's command and both outputs, escaped
(the candidate prints markup that would run script if it were not), failing cases first; a
malformed line of the cases artifact is skipped with a note; 800 cases stay bounded.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import html
import json
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from browser import browser_fixture, page_fixture  # noqa: F401
from difftest_tasks import make_difftest_task

from agentmeter.records import TrialRecord
from agentmeter.report.html import render_report_html, write_html_report
from agentmeter.report.viewer import start_in_thread
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store

#: `hello NAME`: the oracle's text in other letter case (the judge calls it the same);
#: `hello NAME --shout`: markup that would run script if it reached the page unescaped;
#: count/write: exits 3 (Exec fails)
CANDIDATE = '''import sys


def main():
    args = sys.argv[1:]
    if args[0] == "hello" and "--shout" in args:
        print("<img src=x onerror=\\"document.body.dataset.pwned='1'\\"> & " + args[1])
    elif args[0] == "hello":
        print("hello, " + args[1] + "!")
    else:
        sys.exit(3)
'''
PWNED = "<img src=x onerror=\"document.body.dataset.pwned='1'\"> & ada"
TEMPLATES = {"c01": "greet hello <name>", "c02": "greet hello <name> --shout",
             "c03": "greet count <file>", "c04": "greet write <file> <text>"}


@dataclass
class Trial:
    store: Store
    run_id: str
    rec: TrialRecord
    cases: Path  # the stored difftest_cases.jsonl


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trial]:
    root = tmp_path_factory.mktemp("difftest-report")
    make_difftest_task(root / "suite", "greet-restyled", CANDIDATE)

    async def go(store: Store) -> str:
        rid, _ = await run(store, prepare(RunRequest(
            suites=[str(root / "suite")], agents=["oracle"], backend="local",
            judge_model="scripted/judge:normalized")), None)
        return rid

    with Store.open(root / "store") as store:
        rid = asyncio.run(go(store))
        (rec,) = store.latest_completed_trials(rid)
        (cases,) = (root / "store").rglob("difftest_cases.jsonl")
        yield Trial(store, rid, rec, cases)


def _details(page_html: str) -> list[dict[str, Any]]:
    m = re.search(r'id="am-trials" data-encoding="gzip\+base64">([^<]+)</script>', page_html)
    assert m, "no embedded trials"
    details: list[dict[str, Any]] = json.loads(gzip.decompress(base64.b64decode(m.group(1))))[
        "details"]
    return details


def _fragment(t: Trial) -> str:
    (detail,) = _details(render_report_html(t.store, [t.run_id]))
    assert detail["id"] == t.rec.id
    frag = detail["difftest"]
    assert isinstance(frag, str)
    return frag


def _rows(t: Trial) -> list[dict[str, Any]]:
    return [json.loads(line) for line in t.cases.read_text().splitlines()]


def _check_fragment(frag: str, t: Trial) -> None:
    r = t.rec.rewards
    # per class: template, valid cases, rates as the verifier wrote them
    for key, template in TEMPLATES.items():
        row = re.search(rf'<tr data-class="{key}">(.*?)</tr>', frag)
        assert row, key
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
        assert html.escape(template) in cells[1]
        assert cells[2] == str(int(r[f"{key}.cases"]))
        assert cells[3:] == [f"{r[f'{key}.{lvl}'] * 100:.1f}%"
                             for lvl in ("exec", "side_effects", "em", "fm", "sm")], (key, cells)
    assert "found greet (exact); --help fails" in frag  # the entry-point diagnostic
    assert "scripted/judge:normalized · 8 call(s)" in frag and "evaluation cost" in frag
    # every case: its command, and both outputs of a failing one, escaped
    rows = _rows(t)
    for row in rows:
        assert f"<code>{html.escape(row['command'])}</code>" in frag, row["command"]
    shout = next(row for row in rows if row["command"] == "greet hello 'ada' --shout")
    assert shout["candidate_stdout"].strip() == PWNED and not shout["sm"]
    assert html.escape(PWNED) in frag and html.escape(shout["oracle_stdout"]) in frag
    assert "<img" not in frag
    assert html.escape(shout["judge_reason"]) in frag
    # failing cases first
    outcomes = re.findall(r'<tbody class="case" data-outcome="(\w+)"', frag)
    assert len(outcomes) == len(rows)
    order = ["fail", "error", "pass", "excluded"]
    assert [order.index(o) for o in outcomes] == sorted(order.index(o) for o in outcomes)
    assert outcomes[0] == "fail" and "pass" in outcomes and "excluded" in outcomes


def test_report_and_viewer_show_the_cases(trial: Trial) -> None:
    r = trial.rec.rewards
    assert r["build"] == 1.0 and r["c02.sm"] == 0.0 < r["c01.sm"]  # the fixture as intended
    _check_fragment(_fragment(trial), trial)
    viewer = start_in_thread(trial.store)
    try:
        q = urlencode({"run": trial.run_id, "id": trial.rec.id})
        with urllib.request.urlopen(f"{viewer.url}/api/trial?{q}") as resp:
            detail = json.loads(resp.read())
    finally:
        viewer.stop()
    _check_fragment(detail["difftest"], trial)
    shown = next(a for a in detail["artifacts"] if a["name"] == "difftest_cases.jsonl")
    assert shown["shown"] and "text" not in shown and shown["href"]  # linked, not repeated


def test_malformed_lines_are_skipped_with_a_note(trial: Trial, tmp_path: Path) -> None:
    saved = tmp_path / "saved.jsonl"
    shutil.copyfile(trial.cases, saved)
    rows = _rows(trial)
    try:
        good = trial.cases.read_text().splitlines()
        bad = dict(rows[1], oracle_exit="not a number")
        trial.cases.write_text("\n".join([good[0], "{not json", json.dumps(bad), "[1, 2]",
                                          *good[2:]]) + "\n")
        frag = _fragment(trial)
        assert "3 line(s) could not be read and are skipped" in frag
        assert "line 2: not JSON" in frag and "line 3: field oracle_exit" in frag
        assert "line 4: not a JSON object" in frag
        assert frag.count('<tbody class="case"') == len(rows) - 1
        assert html.escape(rows[0]["command"]) in frag
        assert '<tr data-class="c04">' in frag  # the rest of the page is whole
        trial.cases.unlink()
        frag = _fragment(trial)
        assert "difftest_cases.jsonl: the artifact file is missing" in frag
        assert '<tr data-class="c04">' in frag and "Per-case results: n/a" in frag
    finally:
        shutil.copyfile(saved, trial.cases)


def test_a_side_that_did_not_run_says_so() -> None:
    """A case of a candidate that did not build ran on neither side (the engine runs no oracle
    case then): its panes say "not run" and why, never "exit None" or "(empty)" output."""
    from agentmeter.records import CaseOutcome
    from agentmeter.report.html.difftest import Budget, case_body

    c = CaseOutcome(id="c001", cls="greet hello <name>", key="c01", command="greet hello ada",
                    status="not_built")
    body = case_body(c, Budget(remaining=10_000, per_stream=1000)) or ""
    assert body.count("not run: the candidate did not build") == 2, body
    assert "None" not in body and "(empty)" not in body
    ran = c.model_copy(update={"status": "valid", "oracle_exit": 0, "candidate_exit": 1,
                               "oracle_stdout": "Hello, ada!"})
    body = case_body(ran, Budget(remaining=10_000, per_stream=1000)) or ""
    assert "oracle stdout (exit 0)" in body and "candidate stdout (exit 1)" in body
    assert "(empty)" in body and "not run" not in body  # the candidate ran and printed nothing


@contextmanager
def _many_cases(trial: Trial, n: int = 800) -> Iterator[None]:
    """The trial's cases artifact replaced by ``n`` cases with 4000-character outputs."""
    saved = trial.cases.read_bytes()
    rows = _rows(trial)
    big = "x" * 4000
    try:
        with trial.cases.open("w") as f:
            for i in range(n):
                row = dict(rows[i % len(rows)], id=f"n{i:03d}", oracle_stdout=big,
                           candidate_stdout=big.upper())
                f.write(json.dumps(row) + "\n")
        yield
    finally:
        trial.cases.write_bytes(saved)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_800_cases_stay_bounded(trial: Trial) -> None:
    with _many_cases(trial):
        frag = _fragment(trial)
        viewer = start_in_thread(trial.store)
        try:
            q = {"run": trial.run_id, "id": trial.rec.id}
            detail = json.loads(_get(f"{viewer.url}/api/trial?{urlencode(q)}")[1])
            lazy = re.findall(r'data-case="(\w+)">(?:(?!</tbody>).)*data-lazy="1"',
                              detail["difftest"])
            q = {"run": trial.run_id, "trial": trial.rec.id, "try": trial.rec.try_number}
            code, body = _get(f"{viewer.url}/api/difftest_case?{urlencode(q | {'case': lazy[-1]})}")
            missing = _get(f"{viewer.url}/api/difftest_case?{urlencode(q | {'case': 'nope'})}")
        finally:
            viewer.stop()
    assert frag.count('<tbody class="case"') == 800
    # only a few failing cases open; the output embedded is capped per stream and per trial
    assert frag.count('<tr class="case-more">') == 5
    assert "more characters not shown" in frag and "x" * 1501 not in frag
    assert 0 < frag.count('data-lazy="1"') < 800 and "not embedded (size budget)" in frag
    assert len(frag) < 2_000_000
    # the viewer embeds the first cases in full and loads the others on demand, in full
    assert 0 < len(lazy) < 800 and len(detail["difftest"]) < 2_000_000
    assert "x" * 4000 in detail["difftest"]
    assert code == 200 and b"x" * 4000 in body and b"X" * 4000 in body
    assert missing[0] == 404


def test_drill_down_in_browser(trial: Trial, page: Any, artifacts_dir: Path,
                               tmp_path: Path) -> None:
    path = write_html_report(trial.store, [trial.run_id], tmp_path / "report.html")
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    page.locator("#trial-table tbody tr").first.click()
    page.wait_for_selector("#drill:not([hidden]) .difftest")
    drill = page.locator("#drill")
    assert drill.locator("table.dt-classes tbody tr").count() == 4
    cases = drill.locator("tbody.case")
    assert cases.count() == len(_rows(trial))
    # the candidate's markup is shown as text, never run
    shout = drill.locator("tbody.case", has_text="greet hello 'ada' --shout")
    assert shout.locator("tr.case-more").is_visible()  # the first failing cases are open
    panes = shout.locator(".dt-pane pre").all_inner_texts()
    assert panes[0].strip() == "Hello, ada!".upper() and panes[1].strip() == PWNED
    assert page.evaluate("document.body.dataset.pwned") is None
    page.screenshot(path=str(artifacts_dir / "report-difftest-drilldown.png"))
    # a passing case, collapsed at first, expands and collapses
    passing = drill.locator("tbody.case[data-outcome='pass']").first
    assert not passing.locator("tr.case-more").is_visible()
    passing.locator("button.case-toggle").click()
    assert passing.locator("tr.case-more").is_visible()
    assert passing.locator("button.case-toggle").get_attribute("aria-expanded") == "true"
    passing.locator("button.case-toggle").click()
    assert not passing.locator("tr.case-more").is_visible()
    drill.locator("select.dt-filter").select_option("pass")
    visible = [c for c in cases.all() if c.is_visible()]
    assert visible and all(c.get_attribute("data-outcome") == "pass" for c in visible)
    assert page.errors == []
    # the viewer: 800 cases; a case not embedded is loaded when expanded
    with _many_cases(trial):
        viewer = start_in_thread(trial.store)
        try:
            page.goto(f"{viewer.url}/report?{urlencode({'run': trial.run_id})}")
            page.wait_for_selector("body[data-ready='1']", timeout=15_000)
            page.locator("#trial-table tbody tr").first.click()
            page.wait_for_selector("#drill:not([hidden]) .difftest")
            assert drill.locator("tbody.case").count() == 800
            case_id = drill.locator("tbody.case:has(tr[data-lazy])").last.get_attribute(
                "data-case")
            lazy = drill.locator(f"tbody.case[data-case='{case_id}']")
            lazy.locator("button.case-toggle").click()
            page.wait_for_selector("#drill tbody.case[data-loaded='1'] .dt-pane pre")
            texts = drill.locator("tbody.case[data-loaded='1'] .dt-pane pre").all_inner_texts()
            assert texts[0] == "x" * 4000 and texts[1] == "X" * 4000
            page.screenshot(path=str(artifacts_dir / "viewer-difftest-drilldown.png"))
        finally:
            viewer.stop()
    assert page.errors == []

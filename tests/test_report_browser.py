"""The HTML report and the viewer in a real browser (Debian chromium driven by playwright):
no console errors, every chart drawn with the marks the fixture implies, sorting, drill-down,
explicit n/a for missing data, live updates in the viewer. Screenshots go to test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
from browser import browser_fixture, page_fixture  # noqa: F401
from test_report_store import GRID, T0, TASKS, config, populate_grid, populate_missing

from agentmeter.records import RunRecord, TrialRecord, TrialStatus
from agentmeter.report.html import collect, write_html_report
from agentmeter.report.html.charts import pareto
from agentmeter.report.html.collect import ReportData, scored_cells
from agentmeter.report.viewer import RunningViewer, start_in_thread
from agentmeter.store.db import Store

S = TrialStatus
GRID_ID = [config(agent, model).id for agent, model, _, _ in GRID]


@pytest.fixture(scope="module")
def grid_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = tmp_path_factory.mktemp("report-store")
    with Store.open(root) as store:
        populate_grid(store)
        populate_missing(store)
        yield store


def _ready(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)


def _marks(page: Any, chart: str, extra: str = "") -> int:
    return int(page.locator(f'svg[data-chart="{chart}"] .mark{extra}').count())


def _expected_marks(data: ReportData) -> dict[str, int]:
    assert data.card is not None
    rows = data.card.rows
    pts = [(r.usd, r.pass_rate, k) for k, r in enumerate(rows)
           if r.usd is not None and r.pass_rate is not None]
    tv = scored_cells(data)
    assert tv is not None
    return {
        "heatmap-ams": len(rows), "heatmap-pass": len(rows), "heatmap-usd": len(rows),
        "scatter": len(pts), "pareto": len(pareto(pts)),
        "tiers": sum(1 for r in rows for t in r.tiers.values() if t.n_counted),
        "delta": sum(1 for r in rows if r.delta_best is not None),
        "dist-tokens": int((~np.isnan(tv.tokens)).sum()),
        "dist-cost": int((~np.isnan(tv.cost)).sum()),
        "tools": len(data.tools),
    }


def _column(page: Any, table: str, index: int) -> list[str]:
    return [c.strip() for c in page.locator(f"#{table} tbody tr td:nth-child({index})")
            .all_inner_texts()]


def _check_charts(page: Any, data: ReportData) -> None:
    want = _expected_marks(data)
    for chart in ("heatmap-ams", "heatmap-pass", "heatmap-usd", "scatter", "tiers", "delta",
                  "tools"):
        assert _marks(page, chart) == want[chart], chart
    assert _marks(page, "scatter", ".pareto") == want["pareto"] >= 1
    for chart in ("dist-tokens", "dist-cost"):
        counts = page.locator(f'svg[data-chart="{chart}"] .mark').evaluate_all(
            "els => els.map(e => Number(e.dataset.count))")
        assert sum(counts) == want[chart], chart


def test_html_report_in_browser(grid_store: Store, page: Any, artifacts_dir: Path,
                                tmp_path: Path) -> None:
    path = write_html_report(grid_store, ["grid"], tmp_path / "report.html")
    data = collect(grid_store, ["grid"])
    _ready(page, path.as_uri())
    page.screenshot(path=str(artifacts_dir / "report-top.png"))
    _check_charts(page, data)
    # scripted configurations are labelled as test doubles wherever they are named
    assert page.locator("#leaderboard-table .badge.double").count() == 2
    assert page.locator(".double-banner").count() == 1
    # every configuration has a leaderboard row; the winners are named
    assert page.locator("#leaderboard-table tbody tr").count() == len(GRID)
    assert page.locator(".winners li").count() == 4
    # sorting: USD/Pass ascending with n/a last, then descending with n/a still last
    header = page.locator("#leaderboard-table th", has_text="USD/Pass")
    col = page.locator("#leaderboard-table th").all_inner_texts().index("USD/Pass") + 1
    header.click()
    asc = _column(page, "leaderboard-table", col)
    known = [float(v.lstrip("$")) for v in asc if v != "n/a"]
    assert known == sorted(known) and asc[len(known):] == ["n/a"] * (len(asc) - len(known))
    header.click()
    desc = _column(page, "leaderboard-table", col)
    assert [float(v.lstrip("$")) for v in desc if v != "n/a"] == sorted(known, reverse=True)
    assert desc[-1] == "n/a"
    page.locator("#task-table th", has_text="Passed by").click()
    passes = [int(v.split("/")[0]) for v in _column(page, "task-table", 3)]
    assert passes == sorted(passes) and len(passes) == len(TASKS)
    page.locator("#leaderboard").screenshot(path=str(artifacts_dir / "report-leaderboard.png"))
    page.locator("#charts").screenshot(path=str(artifacts_dir / "report-charts.png"))
    page.locator("#tasks").screenshot(path=str(artifacts_dir / "report-tasks.png"))
    _check_trials_and_drill(page, grid_store, artifacts_dir, "report", path.parent)
    assert page.errors == []


def _check_trials_and_drill(page: Any, store: Store, artifacts_dir: Path, prefix: str,
                            report_dir: Path | None = None) -> None:
    tries = store.trials("grid")
    assert page.locator("#trial-page").inner_text().endswith(f"of {len(tries)}")
    page.select_option("#trial-status", "failed")
    failed = [t for t in tries if t.status is S.FAILED]
    page.wait_for_function(f"document.querySelector('#trial-count').textContent"
                           f".startsWith('{len(failed)} ')")
    page.locator("#trial-table tbody tr").first.click()
    page.wait_for_selector("#drill:not([hidden]) h2")
    trial_id = page.locator("#drill h2").inner_text()
    rec = next(t for t in failed if t.id == trial_id)
    calls = store.model_calls("grid", rec.id, rec.try_number)
    drill = page.locator("#drill")
    assert "FAIL: expected 42" in drill.inner_text()  # verifier output
    assert drill.locator("table.calls tbody tr").count() == len(calls)
    assert drill.locator("ul.diff li").count() == 1  # ~ src/main.py
    page.locator("#trials").screenshot(path=str(artifacts_dir / f"{prefix}-trials.png"))
    page.screenshot(path=str(artifacts_dir / f"{prefix}-drilldown.png"))
    page.click("#drill-close")
    # a big log is embedded truncated; a screenshot artifact is linked, not embedded
    page.select_option("#trial-status", "")
    page.fill("#trial-search", f"{GRID_ID[4]}:{TASKS[0]}")
    page.wait_for_function("document.querySelector('#trial-count').textContent === '1 tries'")
    page.locator("#trial-table tbody tr").first.click()
    page.wait_for_selector("#drill:not([hidden]) .artifact")
    assert "bytes omitted" in drill.inner_text()
    # the screenshot is shown (embedded in the report, served by the viewer), the video playable
    shot = drill.locator("img.shot")
    assert shot.count() == 1
    page.wait_for_function("document.querySelector('#drill img.shot').complete")
    assert shot.evaluate("img => img.naturalWidth") == 1  # the 1×1 PNG decoded
    assert drill.locator("video.shot").count() == 1
    log_href = drill.locator(".artifact", has_text="codex.log").locator("a").get_attribute("href")
    if prefix == "report":  # relative to the report file, so it survives copying both
        assert log_href and not log_href.startswith(("file:", "/"))
        assert (report_dir / unquote(log_href)).resolve().is_file()
    page.click("#drill-close")
    # a per-task cell opens that trial
    cell = page.locator("#task-table td.strip i[data-trial]").first
    wanted = cell.get_attribute("data-trial")
    cell.click()
    page.wait_for_selector("#drill:not([hidden]) h2")
    assert page.locator("#drill h2").inner_text() == wanted
    page.click("#drill-close")


@pytest.mark.parametrize("run_id", ["noprice", "allinfra", "single"])
def test_missing_data_shows_na(grid_store: Store, page: Any, artifacts_dir: Path,
                               tmp_path: Path, run_id: str) -> None:
    path = write_html_report(grid_store, [run_id], tmp_path / f"{run_id}.html")
    _ready(page, path.as_uri())
    page.screenshot(path=str(artifacts_dir / f"report-{run_id}.png"), full_page=True)
    assert page.errors == []
    lb = page.locator("#leaderboard")
    if run_id == "noprice":
        col = page.locator("#leaderboard-table th").all_inner_texts().index("USD/Pass") + 1
        assert set(_column(page, "leaderboard-table", col)) == {"n/a"}
        assert page.locator('[data-chart-na="scatter"]').inner_text().count("n/a") == 1
        assert "n/a" in page.locator('[data-chart-na="dist-cost"]').inner_text()
        assert _marks(page, "heatmap-usd", ".na") == 2
        assert "Lowest USD per pass n/a" in lb.inner_text().replace("\n", " ")
    elif run_id == "allinfra":
        col = page.locator("#leaderboard-table th").all_inner_texts().index("Pass") + 1
        assert set(_column(page, "leaderboard-table", col)) == {"n/a"}
        assert _marks(page, "heatmap-ams", ".na") == 3
        for chart in ("delta", "dist-tokens", "dist-cost"):
            assert "n/a" in page.locator(f'[data-chart-na="{chart}"]').inner_text()
    else:
        assert page.locator("#leaderboard-table tbody tr").count() == 1
        assert _marks(page, "delta") == 1  # the only agent is its model's best
        assert "n/a" not in _column(page, "leaderboard-table", 3)


def test_imported_harbor_run_in_browser(page: Any, artifacts_dir: Path, tmp_path: Path) -> None:
    """A run imported from a Harbor job directory: the report shows it like any other run,
    charts and drill-down included, priced as ``agentmeter score`` prices it."""
    from agentmeter.importers import load_import, save_import

    imported = load_import(Path(__file__).parent / "fixtures" / "imports" / "harbor-job",
                           run_id="hb")
    with Store.open(tmp_path / "runs") as store:
        save_import(store, imported)
        run_id = imported.run.id
        path = write_html_report(store, [run_id], tmp_path / "harbor.html")
        data = collect(store, [run_id])
    _ready(page, path.as_uri())
    page.screenshot(path=str(artifacts_dir / "report-imported-harbor.png"), full_page=True)
    assert page.errors == []
    assert page.locator("#leaderboard-table tbody tr").count() == 2
    _check_charts(page, data)
    page.locator("#trial-table tbody tr").first.click()
    page.wait_for_selector("#drill:not([hidden]) h2")
    assert page.locator("#drill h2").inner_text().split(":")[0] in {c.id for c in data.configs}


# --- viewer ------------------------------------------------------------------------------


def _live_run(store: Store) -> list[TrialRecord]:
    """A run in progress: half its trials done, the rest still running."""
    store.create_run(RunRecord(id="live", created_at=T0, status="running"))
    cfgs = [config("native", "scripted/solver"), config("codex", "openai/gpt-5")]
    for cfg in cfgs:
        store.upsert_config(cfg, "live")
    for tid in TASKS:
        store.upsert_task(store.run_tasks("grid")[TASKS.index(tid)], "live")
    pending = []
    for cfg in cfgs:
        for j, tid in enumerate(TASKS):
            rec = TrialRecord(id=f"{cfg.id}:{tid}:0", run_id="live", config_id=cfg.id,
                              task_id=tid, attempt=0, cost_usd=0.01,
                              status=S.PASSED if j < 6 else S.RUNNING,
                              passed=True if j < 6 else None)
            store.save_trial(rec)
            if j >= 6:
                pending.append(rec)
    return pending


@pytest.fixture()
def viewer(grid_store: Store) -> Iterator[RunningViewer]:
    running = start_in_thread(grid_store, interval_ms=300)
    yield running
    running.stop()


def test_viewer_pages_and_live_updates(grid_store: Store, viewer: RunningViewer, page: Any,
                                       artifacts_dir: Path) -> None:
    pending = _live_run(grid_store)
    _ready(page, viewer.url + "/")
    runs = page.locator("#runs-table tbody tr")
    assert runs.count() == len(grid_store.list_runs()) == 5
    page.screenshot(path=str(artifacts_dir / "viewer-runs.png"))
    page.click("#runs-table a:text-is('grid')")
    page.wait_for_selector("body[data-ready='1']")
    _check_charts(page, collect(grid_store, ["grid"]))
    page.screenshot(path=str(artifacts_dir / "viewer-report.png"))
    _check_trials_and_drill(page, grid_store, artifacts_dir, "viewer")
    # paging through trials is done by the server
    page.fill("#trial-search", "")
    page.wait_for_function("document.querySelector('#trial-page').textContent.startsWith('1–50')")
    page.click("#trial-next")
    page.wait_for_function("document.querySelector('#trial-page').textContent.startsWith('51–')")
    assert page.locator("#trial-table tbody tr").count() == 50
    assert page.errors == []
    # live: the page follows the run while it completes
    _ready(page, viewer.url + "/report?run=live")
    page.wait_for_selector("#live-status:not([hidden])")
    assert "running/pending" in page.inner_text("#live-status")
    first = page.locator("#leaderboard-table tbody tr").first.inner_text()
    assert "6/12" in first  # Pass/N with N all tasks of the run, finished or not
    for rec in pending:
        grid_store.save_trial(rec.model_copy(update={"status": S.PASSED, "passed": True}))
    grid_store.update_run_status("live", "finished")
    page.wait_for_selector("body[data-refreshed]", timeout=15_000)
    assert "12/12" in page.locator("#leaderboard-table tbody tr").first.inner_text()
    page.wait_for_function("document.querySelector('#trial-count').textContent === '24 tries'")
    assert page.inner_text('.run[data-run="live"]') == "live · finished"
    page.screenshot(path=str(artifacts_dir / "viewer-live.png"))
    assert page.errors == []

"""Page assembly: one self-contained HTML document (inline CSS, inline SVG charts, inline JS,
trial data embedded as gzip + base64 JSON). The viewer serves the same page with a live data
source instead of the embedded trials."""

from __future__ import annotations

import base64
import gzip
import json
import math
from functools import cache
from importlib.resources import files
from typing import Any

from agentmeter.records import TrialStatus
from agentmeter.report.html import agency, charts, charts_bars, charts_funnel, sections
from agentmeter.report.html.collect import ReportData
from agentmeter.report.html.fmt import esc
from agentmeter.report.html.trials import CALL_COLUMNS, ROW_COLUMNS


@cache
def asset(name: str) -> str:
    return (files("agentmeter.report.html") / name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def _finite(value: Any) -> Any:
    """NaN/inf (a float column of some backends) -> null: JSON.parse rejects them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def pack(value: Any) -> str:
    """gzip + base64 JSON (decoded in the page with DecompressionStream)."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)
    raw = text.encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def charts_section(data: ReportData) -> str:
    figs = [charts.heatmap(data, "ams"), charts.heatmap(data, "pass"), charts.heatmap(data, "usd"),
            charts.scatter(data), charts_bars.tier_profile(data), charts_bars.delta_best(data),
            charts_bars.distribution(data, "tokens"), charts_bars.distribution(data, "cost"),
            charts.tools(data)]
    return ('<section id="charts"><h2>Charts</h2><div class="figs">' + "".join(figs)
            + "</div>" + sections.expensive_failures(data) + "</section>")


def main_content(data: ReportData, task_offset: int = 0, task_limit: int | None = None,
                 task_pager: str = "") -> str:
    """The part of the page that changes as a run progresses (swapped in place when live)."""
    return (f'<section id="leaderboard"><h2>Leaderboard</h2>{sections.leaderboard(data)}'
            f"{sections.winners(data)}{sections.notes(data)}</section>"
            f"{agency.section(data.agency, data.configs)}{charts_funnel.section(data.funnel)}"
            f"{charts_section(data)}"
            f'<section id="tasks"><h2>Tasks</h2>{task_pager}'
            f"{sections.task_table(data, task_offset, task_limit)}{task_pager}</section>")


def _trials_section() -> str:
    statuses = "".join(f'<option value="{s.value}">{s.value}</option>' for s in TrialStatus)
    return ('<section id="trials"><h2>Trials</h2><div class="controls">'
            '<input id="trial-search" type="search" placeholder="search trial id (config:task)">'
            f'<select id="trial-status"><option value="">any status</option>{statuses}</select>'
            '<select id="trial-config"><option value="">any configuration</option></select>'
            '<span id="trial-count"></span></div>'
            '<div class="table-wrap"><table id="trial-table"><thead><tr>'
            '<th data-key="run">Run</th><th data-key="config">Configuration</th>'
            '<th data-key="task">Task</th><th>Try</th><th data-key="status">Status</th>'
            '<th data-key="reward">Reward</th><th data-key="tokens">Tokens</th>'
            '<th data-key="cost">USD</th><th data-key="calls">Calls</th><th>Tools</th>'
            '<th>Seconds</th><th>Error</th></tr></thead><tbody></tbody></table></div>'
            '<div class="pager"><button id="trial-prev" type="button">‹ prev</button>'
            '<span id="trial-page"></span><button id="trial-next" type="button">next ›</button>'
            "</div></section>")


def render_page(data: ReportData, title: str, *, trials_payload: str | None = None,
                live: dict[str, Any] | None = None, task_offset: int = 0,
                task_limit: int | None = None, task_pager: str = "", nav_extra: str = "") -> str:
    meta = {
        "mode": "live" if live else "static",
        "live": live,
        "runs": data.run_ids,
        "configs": {c.id: [c.label, c.scripted] for c in data.configs},
        "rowColumns": ROW_COLUMNS,
        "callColumns": CALL_COLUMNS,
    }
    payload = (f'<script type="application/octet-stream" id="am-trials" '
               f'data-encoding="gzip+base64">{trials_payload}</script>'
               if trials_payload is not None else "")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{esc(title)}</title>'
        f"<style>{asset('report.css')}</style></head>"
        f'<body data-mode="{meta["mode"]}">{sections.header(data, title)}'
        f'<nav>{nav_extra}<a href="#leaderboard">Leaderboard</a>'
        + ('<a href="#agency">AgencyBench</a>' if data.agency is not None else "")
        + ('<a href="#funnel">CLI generation</a>' if data.funnel is not None else "")
        + '<a href="#charts">Charts</a>'
        '<a href="#tasks">Tasks</a><a href="#trials">Trials</a></nav>'
        f'<main id="main">{main_content(data, task_offset, task_limit, task_pager)}</main>'
        f"{_trials_section()}"
        '<aside id="drill" class="drawer" hidden aria-label="trial detail"><button '
        'id="drill-close" type="button" aria-label="close">×</button><div id="drill-body">'
        "</div></aside>"
        f'<script type="application/json" id="am-meta">{_script_json(meta)}</script>{payload}'
        f"<script>{asset('report.js')}</script></body></html>")

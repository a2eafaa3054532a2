"""Viewer-only HTML: the runs list (paginated) and the per-task pager of a report page."""

from __future__ import annotations

from urllib.parse import urlencode

from agentmeter.report.html.fmt import esc, usd
from agentmeter.report.html.page import asset
from agentmeter.store.browse import RunRow

_RUNS_SCRIPT = """
(() => {
  let fp = %s;
  const poll = async () => {
    try {
      const r = await fetch("/api/fingerprint");
      const j = await r.json();
      if (j.fingerprint !== fp) { location.reload(); return; }
    } catch (e) { /* viewer restarting: try again */ }
    setTimeout(poll, %d);
  };
  setTimeout(poll, %d);
  document.body.dataset.ready = "1";
})();
"""


def report_url(run_ids: list[str], **extra: str | int) -> str:
    return "/report?" + urlencode([("run", r) for r in run_ids]
                                  + [(k, str(v)) for k, v in extra.items()])


def runs_page(rows: list[RunRow], total: int, offset: int, limit: int, store_where: str,
              fingerprint: str, interval_ms: int) -> str:
    body = []
    for r in rows:
        status = f'<span class="run run-{esc(r.status)}">{esc(r.status)}</span>'
        body.append(
            f'<tr data-run="{esc(r.id)}"><td><input type="checkbox" name="run" '
            f'value="{esc(r.id)}" aria-label="select {esc(r.id)}"></td>'
            f'<td><a href="{esc(report_url([r.id]))}">{esc(r.id)}</a></td>'
            f'<td>{r.created_at.strftime("%Y-%m-%d %H:%M")}</td><td>{status}</td>'
            f"<td>{esc(r.backend)}</td><td class='num'>{r.configs}</td>"
            f"<td class='num'>{r.tasks}</td><td class='num'>{r.tries:,}</td>"
            f"<td class='num'>{r.passed:,}</td><td class='num'>{r.active:,}</td>"
            f"<td class='num'>{r.infra:,}</td><td class='num'>{usd(r.usd)}</td>"
            f"<td>{r.updated_at.strftime('%H:%M:%S') if r.updated_at else 'n/a'}</td></tr>")
    empty = ('<tr><td colspan="13" class="na">n/a — no runs in this store yet</td></tr>'
             if not rows else "")
    pager = pager_html(total, offset, limit, lambda o: f"/?offset={o}", "runs")
    table = ('<form action="/report" method="get"><div class="table-wrap">'
             '<table id="runs-table" class="runs-table"><thead><tr><th></th><th>Run</th>'
             "<th>Created</th><th>Status</th><th>Backend</th><th>Configs</th><th>Tasks</th>"
             "<th>Tries</th><th>Passed</th><th>Active</th><th>Infra</th><th>USD</th>"
             f'<th>Updated</th></tr></thead><tbody>{"".join(body)}{empty}</tbody></table></div>'
             '<p><button type="submit">Report on the selected runs</button></p></form>')
    script = _RUNS_SCRIPT % (json_str(fingerprint), interval_ms, interval_ms)
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" '
            'href="data:,"><title>agentmeter runs</title>'
            f"<style>{asset('report.css')}</style></head><body>"
            f"<header><h1>agentmeter runs</h1><p class='meta'>store {esc(store_where)} · "
            f"{total:,} run(s) · updates live</p></header><main>{pager}{table}{pager}</main>"
            f"<script>{script}</script></body></html>")


def json_str(value: str) -> str:
    import json

    return json.dumps(value).replace("<", "\\u003c")


def pager_html(total: int, offset: int, limit: int, href: object, what: str) -> str:
    link = href if callable(href) else (lambda o: str(o))
    if total <= limit:
        return ""
    prev = (f'<a href="{esc(link(max(0, offset - limit)))}" class="prev">‹ prev</a>'
            if offset > 0 else "<span>‹ prev</span>")
    nxt = (f'<a href="{esc(link(offset + limit))}" class="next">next ›</a>'
           if offset + limit < total else "<span>next ›</span>")
    return (f'<div class="pager">{prev}<span>{what} {offset + 1}–{min(total, offset + limit)} '
            f"of {total:,}</span>{nxt}</div>")

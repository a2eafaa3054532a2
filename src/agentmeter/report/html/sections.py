"""HTML sections of a report page: header, leaderboard with winners, per-task table, expensive
failures and notes. Static HTML (sortable by the inline script); n/a is always explicit."""

from __future__ import annotations

import numpy as np

from agentmeter.metrics.frame import INFRA, SCORED, TIERS
from agentmeter.metrics.scorecard import ConfigRow, Interval, RepeatedReads
from agentmeter.report.html.charts import display, pairs
from agentmeter.report.html.collect import ConfigView, ReportData, scored_cells
from agentmeter.report.html.fmt import NA, compact, esc, num, pct, sort_key, usd

DOUBLE = ('<span class="badge double" title="driven by the scripted offline model: a test '
          'double at the model boundary, not a real model">test double</span>')


def config_cell(cfg: ConfigView) -> str:
    return f'<span class="cfg">{esc(cfg.label)}</span>{" " + DOUBLE if cfg.scripted else ""}'


def _td(text: str, key: float | None | str, cls: str = "num") -> str:
    sk = key if isinstance(key, str) else sort_key(key)
    na = " na" if text == NA else ""
    return f'<td class="{cls}{na}" data-sort="{esc(sk)}">{text}</td>'


def _ci(ci: Interval | None) -> str:
    return "" if ci is None else f'<span class="ci">[{ci.low:.3f}, {ci.high:.3f}]</span>'


def _rereads(rr: RepeatedReads | None) -> str:
    if rr is None or rr.mean is None:
        return _td(NA, None)
    return _td(f"{rr.mean:.2f} <small>({rr.total}, max {rr.max})</small>", rr.mean)


def header(data: ReportData, title: str) -> str:
    runs = " ".join(f'<span class="run run-{esc(r.status)}" data-run="{esc(r.id)}">{esc(r.id)} · '
                    f"{esc(r.status)}</span>" for r in data.runs)
    card = data.card
    spec = (f"tiers: {esc(card.tier_source)} · budgets: {esc(card.budget_source)} · "
            f"α = {card.alpha:g} · infra_invalid: {esc(card.infra_policy)} · "
            f"{card.n_tasks} tasks · "
            + (f"{card.bootstrap.resamples} bootstrap resamples ({card.bootstrap.level:.0%} CI)"
               if card.bootstrap else "no CIs")) if card else "scoring n/a"
    banner = (f'<p class="double-banner">{DOUBLE} Configurations marked this way use the '
              "scripted offline model: their figures test the harness, they say nothing "
              "about any real model.</p>" if data.scripted_any else "")
    return (f'<header><h1>{esc(title)}</h1><p class="runs">{runs}</p>'
            f'<p class="meta">store {esc(data.store_where)} · generated '
            f'{data.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")} · {spec}</p>{banner}'
            '<p id="live-status" class="live" hidden></p></header>')


def leaderboard(data: ReportData) -> str:
    items = pairs(data)
    if not items:
        return '<p class="na">Leaderboard: n/a — no scored configuration.</p>'
    head = [("#", "num"), ("Configuration", "text"), ("Pass", "num"),
            *((f"{g.capitalize()} pass", "num") for g in TIERS),
            ("Tok/Pass", "num"), ("USD/Pass", "num"),
            *((f"S<sub>{g}</sub>", "num") for g in TIERS), ("AMS [CI]", "num"),
            ("Δbest", "num"), ("Infra", "num"),
            ('<span title="repeated file reads per selected trajectory (total, max); '
             'descriptive, not an AMS component">Rep. reads</span>', "num")]
    if data.evaluation:  # the judges' cost: evaluation, not the configuration's own spending
        head.append(('<span title="judge model calls grading the tries (evaluation cost, '
                     'not part of the agent\'s cost)">Judge USD</span>', "num"))
    ths = "".join(f'<th data-type="{t}" tabindex="0">{h}</th>' for h, t in head)
    ranked = data.ranked()
    rank = {k: i + 1 for i, k in enumerate(ranked)}
    body = []
    for k in ranked:
        cfg, r = items[k]
        cells = [_td(str(rank[k]), float(rank[k])),
                 _td(config_cell(cfg), cfg.label, "text"),
                 # Pass/N: N is every task of the scoring, as the rate is
                 _td(f"{r.passes}/{r.n_tasks} <small>{pct(r.pass_rate)}</small>"
                     if r.n_scored else NA, r.pass_rate)]
        for g in TIERS:
            t = r.tiers[g]
            cells.append(_td(f"{t.passes}/{t.n_counted}" if t.n_counted else NA,
                             t.passes / t.n_counted if t.n_counted else None))
        cells += [_td(compact(r.tok_per_pass), r.tok_per_pass),
                  _td(usd(r.usd_per_pass), r.usd_per_pass)]
        cells += [_td(num(r.tiers[g].score), r.tiers[g].score) for g in TIERS]
        cells += [_td(f"<b>{num(r.ams)}</b> {_ci(r.ci.get('ams'))}" if r.ams is not None
                      else NA, r.ams),
                  _td(num(r.delta_best), r.delta_best),
                  _td(str(r.n_infra_invalid), float(r.n_infra_invalid)),
                  _rereads(r.repeated_reads)]
        if data.evaluation:
            ev = data.evaluation.get(cfg.id)
            cost = ev.cost_usd if ev is not None else None
            cells.append(_td(usd(cost) if ev is not None else "-", cost))
        body.append(f'<tr data-config="{esc(cfg.id)}">{"".join(cells)}</tr>')
    return (f'<div class="table-wrap"><table id="leaderboard-table" class="sortable">'
            f'<thead><tr>{ths}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def winners(data: ReportData) -> str:
    if data.card is None:
        return '<p class="na">Winners: n/a</p>'
    labels = {c.id: display(c) for c in data.configs}
    rows = {r.config_id: r for r in data.card.rows}
    w = data.card.winners

    def show(ids: list[str], value: str) -> str:
        if not ids:
            return f'<span class="na">{NA}</span>'
        return ", ".join(f"<b>{esc(labels.get(i, i))}</b>" for i in ids) + f" ({value})"

    def first(ids: list[str]) -> ConfigRow | None:
        return rows.get(ids[0]) if ids else None

    p, t, u, a = first(w.passes), first(w.tok_per_pass), first(w.usd_per_pass), first(w.ams)
    items = [("Most passes", show(w.passes, f"{p.passes}/{p.n_tasks}" if p else "")),
             ("Fewest tokens per pass", show(w.tok_per_pass, compact(t.tok_per_pass) if t else "")),
             ("Lowest USD per pass", show(w.usd_per_pass, usd(u.usd_per_pass) if u else "")),
             ("Highest AMS", show(w.ams, num(a.ams) if a else ""))]
    lis = "".join(f'<li data-criterion="{esc(k)}"><span>{esc(k)}</span> {v}</li>'
                  for k, v in items)
    models = "".join(
        f"<tr><td>{esc(m.model)}</td><td>{esc(m.best_agent)} ({m.best_ams:.3f})</td>"
        f"<td>{esc(m.worst_agent)} ({m.worst_ams:.3f})</td><td class='num'>{m.spread:.3f}</td>"
        "</tr>" for m in data.card.models)
    table = (f'<table class="small"><thead><tr><th>Model</th><th>Best agent</th>'
             f'<th>Worst agent</th><th>Spread</th></tr></thead><tbody>{models}</tbody></table>'
             if models else "")
    return f'<div class="winners"><h3>Winner under each criterion</h3><ul>{lis}</ul>{table}</div>'


def notes(data: ReportData) -> str:
    items = data.problems + (data.card.notes if data.card else [])
    if not items:
        return ""
    return ('<details class="notes" open><summary>Notes</summary><ul>'
            + "".join(f"<li>{esc(n)}</li>" for n in items) + "</ul></details>")


def task_table(data: ReportData, offset: int = 0, limit: int | None = None) -> str:
    """Per task: tier, passes, one cell per configuration (status, cost), cheapest pass."""
    cells = data.cells
    if cells is None or not data.task_ids:
        return '<p class="na">Per-task table: n/a — nothing scored.</p>'
    n_t = len(data.task_ids)
    stop = n_t if limit is None else min(n_t, offset + limit)
    labels = [display(c) for c in data.configs]
    won = (cells.state == SCORED) & (cells.passed == 1)
    cost_pass = np.where(won, cells.cost, np.nan)
    order = data.ranked()
    head = ('<thead><tr><th data-type="text" tabindex="0">Task</th>'
            '<th data-type="text" tabindex="0">Tier</th><th data-type="num" tabindex="0">'
            'Passed by</th><th class="legend">Configurations, leaderboard order <i class="s-pass">'
            '</i>pass<i class="s-fail"></i>fail<i class="s-infra"></i>infra<i class="s-none">'
            '</i>none</th>'
            '<th data-type="num" tabindex="0">Cheapest pass</th>'
            '<th data-type="num" tabindex="0">Median pass cost</th></tr></thead>')
    rows = []
    for j in range(offset, stop):
        tid = data.task_ids[j]
        col_state, col_won = cells.state[:, j], won[:, j]
        strip = []
        for c in order:
            cfg = data.configs[c]
            st = col_state[c]
            kind = ("pass" if col_won[c] else "fail") if st == SCORED else (
                "infra" if st == INFRA else "none")
            cost = usd(float(cells.cost[c, j])) if st != 0 else NA
            trial = f"{cfg.id}:{tid}:{int(cells.attempt[c, j])}" if st != 0 else ""
            attr = f' data-trial="{esc(trial)}"' if trial else ""
            strip.append(f'<i class="s-{kind}"{attr} title="{esc(labels[c])}: {kind}, '
                         f'{cost}"></i>')
        n_scored = int((col_state == SCORED).sum())
        passes = int(col_won.sum())
        costs = cost_pass[:, j]
        has = ~np.isnan(costs)
        cheapest = (f"{usd(float(costs[has].min()))} <small>"
                    f"{esc(labels[int(np.nanargmin(costs))])}</small>") if has.any() else NA
        cheap_key = float(costs[has].min()) if has.any() else None
        med = float(np.median(costs[has])) if has.any() else None
        tier = data.task_tiers[j] or NA
        stored = data.stored_tiers[j]
        shown = esc(tier) + (f" <small>(stored {esc(stored)})</small>"
                             if stored and stored != data.task_tiers[j] else "")
        rows.append(f'<tr><td class="text">{esc(tid)}</td>{_td(shown, tier, "text")}'
                    f'{_td(f"{passes}/{n_scored}" if n_scored else NA, passes if n_scored else None)}'
                    f'<td class="strip">{"".join(strip)}</td>{_td(cheapest, cheap_key)}'
                    f'{_td(usd(med), med)}</tr>')
    return (f'<div class="table-wrap"><table id="task-table" class="sortable">{head}<tbody>'
            f'{"".join(rows)}</tbody></table></div>')


def expensive_failures(data: ReportData, top: int = 12) -> str:
    tv = scored_cells(data)
    if tv is None or data.card is None:
        return ""
    tau = {t.tier: t.tau for t in data.card.tiers}
    failed = ~tv.passed & ~np.isnan(tv.cost)
    if not failed.any():
        return '<p class="na">Expensive failures: n/a — no failed trial with a known cost.</p>'
    idx = np.flatnonzero(failed)
    idx = idx[np.argsort(-tv.cost[idx], kind="stable")][:top]
    rows = []
    for i in idx:
        c, j = int(tv.config[i]), int(tv.task[i])
        cfg, tid = data.configs[c], data.task_ids[j]
        tier = data.task_tiers[j]
        limit = tau.get(tier) if tier in tau else None
        over = limit is not None and float(tv.cost[i]) > limit
        trial = f"{cfg.id}:{tid}:{int(data.cells.attempt[c, j])}" if data.cells is not None else ""
        rows.append(f'<tr class="{"over" if over else ""}"><td>{config_cell(cfg)}</td>'
                    f'<td><a href="#trial={esc(trial)}" data-trial="{esc(trial)}">{esc(tid)}</a>'
                    f'</td><td>{esc(tier or NA)}</td><td class="num">{usd(float(tv.cost[i]))}</td>'
                    f'<td class="num">{compact(float(tv.tokens[i]))}</td>'
                    f'<td class="num">{usd(limit)}</td><td>{"yes" if over else "no"}</td></tr>')
    return ('<h3>Most expensive failures</h3><div class="table-wrap"><table id="expensive" '
            'class="small"><thead><tr><th>Configuration</th><th>Task</th><th>Tier</th>'
            '<th>Cost</th><th>Tokens</th><th>τ (tier)</th><th>Above τ</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")

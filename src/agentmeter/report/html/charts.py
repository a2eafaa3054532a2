"""Grid and point charts: model × agent heatmaps, cost vs success with the Pareto frontier,
tool-call frequency per agent. Each returns a ``<figure>`` (or an explicit n/a figure)."""

from __future__ import annotations

import math
from collections.abc import Callable

from agentmeter.metrics.scorecard import ConfigRow
from agentmeter.report.html import svg
from agentmeter.report.html.collect import ConfigView, ReportData
from agentmeter.report.html.fmt import NA, compact, esc, known, pct, usd

CATEGORICAL = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf")
DAGGER = " †"


def short(label: str, n: int = 28) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def display(cfg: ConfigView) -> str:
    return cfg.label + (DAGGER if cfg.scripted else "")


def pairs(data: ReportData) -> list[tuple[ConfigView, ConfigRow]]:
    if data.card is None:
        return []
    return list(zip(data.configs, data.card.rows, strict=True))


def _agent_columns(items: list[tuple[ConfigView, ConfigRow]]) -> tuple[list[str], list[str],
                                                                       dict[str, tuple[str, str]]]:
    """Row (model) and column (agent) keys; two configs of one model × agent get their own
    column (agent + config id) so every configuration has a cell."""
    where: dict[str, tuple[str, str]] = {}
    seen: set[tuple[str, str]] = set()
    for c, _ in items:
        col = c.agent if (c.model, c.agent) not in seen else f"{c.agent} ({c.id[:8]})"
        seen.add((c.model, c.agent))
        where[c.id] = (c.model + (DAGGER if c.scripted else ""), col)
    rows = sorted({m for m, _ in where.values()})
    cols = sorted({a for _, a in where.values()})
    return rows, cols, where


HEATMAPS: dict[str, tuple[str, str, Callable[[ConfigRow], float | None], str]] = {
    "ams": ("AMS by model × agent", "good", lambda r: r.ams, "AMS"),
    "pass": ("Pass rate by model × agent", "good", lambda r: r.pass_rate, "pass rate"),
    "usd": ("Billable USD spent by model × agent", "cost", lambda r: r.usd, "USD"),
}


def heatmap(data: ReportData, metric: str) -> str:
    caption, palette, value, what = HEATMAPS[metric]
    name = f"heatmap-{metric}"
    items = pairs(data)
    if not items:
        return svg.na_figure(name, caption, "no scored configuration")
    rows, cols, where = _agent_columns(items)
    vals = [value(r) for _, r in items]
    known_vals = [v for v in vals if v is not None and known(v)]
    lo, hi = (0.0, 1.0) if palette == "good" else (min(known_vals, default=0.0),
                                                    max(known_vals, default=1.0))
    left = min(240, 12 + 7 * max(len(r) for r in rows))
    cw, rh, top = 118, 34, 46
    w, h = left + cw * len(cols) + 10, top + rh * len(rows) + 10
    body = [svg.text(left + cw * j + cw / 2, top - 10, short(a, 17), "middle", "axis",
                     f' data-full="{esc(a)}"') for j, a in enumerate(cols)]
    body += [svg.text(left - 8, top + rh * i + rh / 2 + 4, short(m, 34), "end", "axis")
             for i, m in enumerate(rows)]
    for i in range(len(rows)):
        for j in range(len(cols)):
            body.append(svg.rect(left + cw * j + 1, top + rh * i + 1, cw - 2, rh - 2, "#f8fafc",
                                 "empty"))
    fmt = usd if metric == "usd" else (pct if metric == "pass" else
                                       (lambda v: NA if v is None else f"{v:.3f}"))
    for (cfg, _row), v in zip(items, vals, strict=True):
        m, a = where[cfg.id]
        i, j = rows.index(m), cols.index(a)
        x, y = left + cw * j + 1, top + rh * i + 1
        if v is None or not known(v):
            fill, cls = "#e5e7eb", "mark cell na"
        else:
            span = (hi - lo) or 1.0
            fill, cls = svg.color((v - lo) / span, palette), "mark cell"
        tip = f"{display(cfg)}: {what} {fmt(v)}"
        body.append(svg.rect(x, y, cw - 2, rh - 2, fill, cls, tip, f' data-config="{esc(cfg.id)}"'))
        body.append(svg.text(x + (cw - 2) / 2, y + rh / 2 + 3, fmt(v), "middle", "cell-label",
                             f' style="fill:{svg.ink(fill)}"'))
    note = "† scripted model: a test double, not a real model" if data.scripted_any else ""
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption), note)


def pareto(points: list[tuple[float, float, int]]) -> list[int]:
    """Indices on the cost/success frontier: no other point is cheaper and at least as good."""
    best = -math.inf
    front = []
    for _cost, success, k in sorted(points, key=lambda p: (p[0], -p[1])):
        if success > best:
            front.append(k)
            best = success
    return front


def scatter(data: ReportData) -> str:
    name, caption = "scatter", "Cost vs success (Pareto frontier marked)"
    items = pairs(data)
    pts = [(r.usd, r.pass_rate, k) for k, (_, r) in enumerate(items)
           if r.usd is not None and r.pass_rate is not None and known(r.usd)]
    missing = [display(c) for c, r in items if r.usd is None or r.pass_rate is None]
    why = "no configuration has both a known cost and a pass rate"
    if not pts:
        return svg.na_figure(name, caption, why + (f" ({', '.join(missing)})" if missing else ""))
    w, h, ml, mr, mt, mb = 660, 400, 64, 24, 20, 52
    costs = [p[0] for p in pts]
    lo, hi = min(costs), max(costs)
    use_log = lo > 0 and hi / lo > 20
    if use_log:
        sx = svg.log10_scale(lo / 1.3, hi * 1.3, ml, w - mr)
        ticks = svg.log_ticks(lo / 1.3, hi * 1.3) or [lo, hi]
    else:
        pad = (hi - lo) * 0.08 or max(hi * 0.1, 0.01)
        sx = svg.linear(max(lo - pad, 0), hi + pad, ml, w - mr)
        ticks = svg.nice_ticks(max(lo - pad, 0), hi + pad)
    sy = svg.linear(0, 1, h - mb, mt)
    body = []
    for t in ticks:
        body += [svg.line(sx(t), mt, sx(t), h - mb), svg.text(sx(t), h - mb + 16, usd(t),
                                                              "middle", "axis")]
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        body += [svg.line(ml, sy(v), w - mr, sy(v)), svg.text(ml - 6, sy(v) + 4, pct(v),
                                                              "end", "axis")]
    body.append(svg.text((ml + w - mr) / 2, h - 12, "billable USD spent"
                         + (" (log scale)" if use_log else ""), "middle", "axis-title"))
    body.append(svg.text(14, (mt + h - mb) / 2, "pass rate", "middle", "axis-title",
                         f' transform="rotate(-90 14 {svg.f((mt + h - mb) / 2)})"'))
    front = pareto(pts)
    fpts = sorted((sx(items[k][1].usd or 0), sy(items[k][1].pass_rate or 0)) for k in front)
    if len(fpts) > 1:
        path = " ".join(f"{svg.f(x)},{svg.f(y)}" for x, y in fpts)
        body.append(f'<polyline class="frontier" points="{path}"/>')
    agents = sorted({c.agent for c, _ in items})
    for cost, success, k in pts:
        cfg, row = items[k]
        on = k in front
        fill = CATEGORICAL[agents.index(cfg.agent) % len(CATEGORICAL)]
        tip = (f"{display(cfg)}: {usd(cost)}, pass {pct(success)}, AMS "
               f"{NA if row.ams is None else f'{row.ams:.3f}'}" + (" — on the Pareto frontier"
                                                                    if on else ""))
        body.append(f'<circle class="mark point{" pareto" if on else ""}" cx="{svg.f(sx(cost))}" '
                    f'cy="{svg.f(sy(success))}" r="{7 if on else 5.5}" fill="{fill}" '
                    f'data-config="{esc(cfg.id)}">{svg.title(tip)}</circle>')
        if on:  # alternate above/below so neighbouring frontier labels do not collide
            dy = -9 if sorted(front, key=lambda i: items[i][1].usd or 0).index(k) % 2 else 16
            body.append(svg.text(sx(cost) + 9, sy(success) + dy, short(display(cfg), 30),
                                 "start", "point-label"))
    legend = " ".join(f'<span class="key" style="--c:{CATEGORICAL[i % len(CATEGORICAL)]}">'
                      f"{esc(a)}</span>" for i, a in enumerate(agents))
    note = f"colour = agent: {legend}; ringed points lie on the frontier"
    if missing:
        note += f"; not plotted (cost or pass rate n/a): {esc(', '.join(missing))}"
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption), note)


def tools(data: ReportData, top: int = 14) -> str:
    name, caption = "tools", "Tool calls per trial, by agent"
    if not data.tools:
        return svg.na_figure(name, caption, "no tool calls recorded")
    totals: dict[str, int] = {}
    for u in data.tools:
        totals[u.tool] = totals.get(u.tool, 0) + u.calls
    names = sorted(totals, key=lambda t: (-totals[t], t))
    shown = names[:top] + (["(other)"] if len(names) > top else [])
    agents = sorted({u.agent for u in data.tools})
    grid: dict[tuple[str, str], tuple[int, int]] = {}
    for u in data.tools:
        col = u.tool if u.tool in names[:top] else "(other)"
        calls, _ = grid.get((u.agent, col), (0, u.trials))
        grid[(u.agent, col)] = (calls + u.calls, u.trials)
    means = {k: c / n for k, (c, n) in grid.items() if n}
    hi = max(means.values(), default=1.0) or 1.0
    left = min(200, 14 + 7 * max(len(a) for a in agents))
    cw, rh, top_m = 70, 30, 70
    w, h = left + cw * len(shown) + 10, top_m + rh * len(agents) + 10
    body = [svg.text(left + cw * j + cw / 2, top_m - 8, short(t, 14), "start", "axis",
                     f' transform="rotate(-35 {svg.f(left + cw * j + cw / 2)} '
                     f'{svg.f(top_m - 8)})"') for j, t in enumerate(shown)]
    body += [svg.text(left - 8, top_m + rh * i + rh / 2 + 4, a, "end", "axis")
             for i, a in enumerate(agents)]
    for i, a in enumerate(agents):
        for j, t in enumerate(shown):
            x, y = left + cw * j + 1, top_m + rh * i + 1
            if (a, t) not in means or grid[(a, t)][0] == 0:
                body.append(svg.rect(x, y, cw - 2, rh - 2, "#f8fafc", "empty"))
                continue
            v = means[(a, t)]
            fill = svg.color(0.15 + 0.85 * v / hi)
            body.append(svg.rect(x, y, cw - 2, rh - 2, fill, "mark cell",
                                 f"{a} · {t}: {v:.2f} per trial ({grid[(a, t)][0]:,} calls)"))
            body.append(svg.text(x + (cw - 2) / 2, y + rh / 2 + 3, compact(v), "middle",
                                 "cell-label", f' style="fill:{svg.ink(fill)}"'))
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption),
                      "mean calls per completed try; infra_invalid tries included")

"""Bar charts: tier pass profile per configuration, same-model Δbest, and the token / cost
distributions of passed vs failed trials (log-binned, failures mirrored below the axis)."""

from __future__ import annotations

import math

import numpy as np

from agentmeter.metrics.frame import TIERS
from agentmeter.report.html import svg
from agentmeter.report.html.charts import display, pairs, short
from agentmeter.report.html.collect import ReportData, scored_cells
from agentmeter.report.html.fmt import compact, esc, pct, usd


def tier_profile(data: ReportData) -> str:
    name, caption = "tiers", "Tier pass profile per configuration"
    items = pairs(data)
    if not items:
        return svg.na_figure(name, caption, "no scored configuration")
    left, bar, gap, w = 250, 9, 10, 660
    sx = svg.linear(0, 1, left, w - 60)
    h = 30 + len(items) * (3 * bar + gap) + 10
    body = []
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        body += [svg.line(sx(v), 22, sx(v), h - 8), svg.text(sx(v), 14, pct(v), "middle",
                                                             "axis")]
    for k, (cfg, row) in enumerate(items):
        y0 = 26 + k * (3 * bar + gap)
        body.append(svg.text(left - 8, y0 + 1.5 * bar + 4, short(display(cfg), 36), "end",
                             "axis"))
        for gi, g in enumerate(TIERS):
            fig = row.tiers[g]
            y = y0 + gi * bar
            if fig.n_counted == 0:
                body.append(svg.text(left + 4, y + bar - 1, f"{g}: n/a", "start", "na-label"))
                continue
            rate = fig.passes / fig.n_counted
            body.append(svg.rect(left, y, sx(rate) - left, bar - 1, svg.TIER_COLORS[g],
                                 "mark bar", f"{display(cfg)} · {g}: {fig.passes}/"
                                 f"{fig.n_counted} passed ({pct(rate)})"))
            body.append(svg.text(sx(rate) + 4, y + bar - 1, f"{fig.passes}/{fig.n_counted}",
                                 "start", "bar-label"))
    keys = " ".join(f'<span class="key" style="--c:{svg.TIER_COLORS[g]}">{g}</span>'
                    for g in TIERS)
    source = data.card.tier_source if data.card else "n/a"
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption),
                      f"{keys}; bars = passes / counted tasks of the tier (tiers: {esc(source)})")


def delta_best(data: ReportData) -> str:
    name, caption = "delta", "Same-model Δbest (AMS gap to the model's best agent)"
    items = sorted(((c, r) for c, r in pairs(data) if r.delta_best is not None),
                   key=lambda p: (p[0].model, p[1].delta_best or 0.0))
    if not items:
        return svg.na_figure(name, caption, "no configuration has an AMS")
    hi = max(max(r.delta_best or 0.0 for _, r in items), 0.01)
    left, rh, w = 250, 20, 660
    sx = svg.linear(0, hi, left, w - 70)
    h = 30 + len(items) * rh + 8 * len({c.model for c, _ in items})
    body = [svg.text(left, 14, "0 = best agent of its model", "start", "axis")]
    y, model = 24.0, None
    for cfg, row in items:
        if model is not None and cfg.model != model:
            y += 8
            body.append(svg.line(10, y - 4, w - 10, y - 4, "sep"))
        model = cfg.model
        d = row.delta_best or 0.0
        tip = f"{display(cfg)}: Δbest {d:.3f} (AMS {row.ams:.3f})" if row.ams is not None else ""
        body.append(svg.text(left - 8, y + rh / 2 + 3, short(display(cfg), 36), "end", "axis"))
        if d == 0:
            cx, cy = left + 4, y + rh / 2
            body.append(f'<path class="mark best" d="M{svg.f(cx - 5)},{svg.f(cy)} '
                        f'L{svg.f(cx)},{svg.f(cy - 5)} L{svg.f(cx + 5)},{svg.f(cy)} '
                        f'L{svg.f(cx)},{svg.f(cy + 5)}Z">{svg.title(tip + " — best")}</path>')
            body.append(svg.text(left + 14, y + rh / 2 + 4, "best", "start", "bar-label"))
        else:
            body.append(svg.rect(left, y + 3, sx(d) - left, rh - 6, "#ef8a62", "mark bar", tip))
            body.append(svg.text(sx(d) + 4, y + rh / 2 + 4, f"−{d:.3f}", "start", "bar-label"))
        y += rh
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption))


def _bins(values: np.ndarray, n: int = 24) -> tuple[np.ndarray, bool]:
    pos = values[values > 0]
    if pos.size == 0:
        return np.array([0.0, 1.0]), False
    lo, hi = float(pos.min()), float(pos.max())
    if hi / lo < 10:
        return np.linspace(lo * 0.999, hi * 1.001 + 1e-12, n + 1), False
    return np.geomspace(lo * 0.999, hi * 1.001, n + 1), True


def distribution(data: ReportData, what: str) -> str:
    """Histogram of tokens or cost of the selected scored trials: passed up, failed down."""
    name = f"dist-{what}"
    caption = f"{'Raw tokens' if what == 'tokens' else 'Billable cost'} per trial: passed vs failed"
    tv = scored_cells(data)
    if tv is None:
        return svg.na_figure(name, caption, "no scored trial")
    values = tv.tokens if what == "tokens" else tv.cost
    ok = ~np.isnan(values)
    if not ok.any():
        return svg.na_figure(name, caption, f"no trial has a known {what}"
                             + (" (no prices)" if what == "cost" else ""))
    v, passed = values[ok], tv.passed[ok]
    edges, use_log = _bins(v)
    zero = v <= 0
    fmt = compact if what == "tokens" else usd
    w, h, ml, mr, mid = 660, 300, 56, 20, 150
    nb = len(edges) - 1
    bw = (w - ml - mr - 40) / nb
    counts = {}
    for side, mask in (("passed", passed), ("failed", ~passed)):
        idx = np.clip(np.searchsorted(edges, v[mask & ~zero], side="right") - 1, 0, nb - 1)
        counts[side] = (np.bincount(idx, minlength=nb), int((mask & zero).sum()))
    top = max(max(int(c.max()), z) for c, z in counts.values()) or 1
    sy = svg.linear(0, top, 0, mid - 24)
    body = [svg.line(ml, mid, w - mr, mid, "axis-line")]
    for side, sign, colour in (("passed", -1, svg.STATUS_COLORS["passed"]),
                               ("failed", 1, svg.STATUS_COLORS["failed"])):
        c, z = counts[side]
        cols = [(-1, z, "0", "0")] + [(b, int(c[b]), fmt(edges[b]), fmt(edges[b + 1]))
                                      for b in range(nb)]
        for b, count, a, bnd in cols:
            if count == 0:
                continue
            x = ml + (b + 1) * bw + (0 if b >= 0 else -bw / 2 + 10)
            hgt = sy(count)
            y = mid - hgt if sign < 0 else mid
            rng = "= 0" if b < 0 else f"{a} – {bnd}"
            body.append(svg.rect(x + 1, y, bw - 2, hgt, colour, f"mark bar {side}",
                                 f"{count} {side} trial(s) with {what} {rng}",
                                 f' data-count="{count}"'))
    for b in range(0, nb + 1, 4):
        body.append(svg.text(ml + (b + 1) * bw, h - 10, fmt(edges[min(b, nb)]), "middle",
                             "axis"))
    body += [svg.text(ml - 6, 20, "passed ↑", "end", "axis"),
             svg.text(ml - 6, h - 34, "failed ↓", "end", "axis")]
    note = ("log-spaced bins; " if use_log else "") + f"{int(passed.sum())} passed, " \
        f"{int((~passed).sum())} failed (selected scored trials)"
    if (~ok).any():
        note += f"; {int((~ok).sum())} with {what} n/a not shown"
    if what == "cost" and data.card is not None:
        taus = [t for t in data.card.tiers if t.tau is not None]
        if taus:
            note += "; expensive-failure thresholds τ: " + ", ".join(
                f"{t.tier} {usd(t.tau)}" for t in taus)
            for n, t in enumerate(taus):
                if t.tau is not None and edges[0] <= t.tau <= edges[-1]:
                    pos = (math.log(t.tau / edges[0]) / math.log(edges[-1] / edges[0])
                           if use_log else (t.tau - edges[0]) / (edges[-1] - edges[0]))
                    x = ml + bw + pos * nb * bw
                    body.append(svg.line(x, mid, x, h - 26, "tau"))
                    body.append(svg.text(x + 3, h - 28 - 11 * n, f"τ {t.tier}", "start",
                                         "tau-label"))
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption), esc(note))

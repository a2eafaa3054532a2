"""The CLI-Tool-Bench section: the funnel per configuration (ranked by SM) and the paper's
analyses (metrics/funnel_analyses.py) as inline SVG: RQ2 SM by oracle-LOC bucket with the
pooled LOESS trend, RQ3 cost (mean with min–max), RQ4 structure (files per repository: median,
quartiles, range, beside the oracle's), §5.1 robustness on negative cases and runtime (candidate
/ oracle time on the tasks every configuration ran). No script: each chart is drawn here."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agentmeter.metrics.from_store import FunnelReport
from agentmeter.report.html import svg
from agentmeter.report.html.charts import short
from agentmeter.report.html.fmt import esc, pct, usd

LEVELS = (("build", "Build"), ("exec", "Exec"), ("em", "EM"), ("fm", "FM"), ("sm", "SM"))
LEVEL_COLORS = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08306b")
BUCKETS = ("easy", "medium", "hard")
LEFT, WIDTH = 230, 660


def _labels(report: FunnelReport) -> dict[str, str]:
    return {r.config_id: r.label for r in report.rows}


def _grouped(name: str, caption: str, rows: Sequence[tuple[str, Sequence[float | None]]],
             keys: Sequence[str], colors: Sequence[str], note: str) -> str:
    """Horizontal grouped bars on a 0–100 % axis: one group per row, one bar per key."""
    bar, gap = 8, 10
    sx = svg.linear(0, 1, LEFT, WIDTH - 50)
    h = 30 + len(rows) * (len(keys) * bar + gap) + 8
    body = []
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        body += [svg.line(sx(v), 22, sx(v), h - 6), svg.text(sx(v), 14, pct(v), "middle", "axis")]
    for k, (label, values) in enumerate(rows):
        y0 = 26 + k * (len(keys) * bar + gap)
        body.append(svg.text(LEFT - 8, y0 + len(keys) * bar / 2 + 4, short(label, 34), "end",
                             "axis"))
        for j, (key, value) in enumerate(zip(keys, values, strict=True)):
            y = y0 + j * bar
            if value is None or not math.isfinite(value):
                body.append(svg.text(LEFT + 4, y + bar - 1, f"{key}: n/a", "start", "na-label"))
                continue
            body.append(svg.rect(LEFT, y, max(sx(value) - LEFT, 0.5), bar - 1, colors[j],
                                 "mark bar", f"{label} · {key}: {pct(value, 1)}"))
    legend = " ".join(f'<span class="key" style="--c:{c}">{esc(k)}</span>'
                      for k, c in zip(keys, colors, strict=True))
    return svg.figure(name, caption, svg.svg(name, WIDTH, h, body, caption), f"{legend}; {note}")


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f}"


def _ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}×"


def _ranges(name: str, caption: str,
            rows: Sequence[tuple[str, float | None, float | None, float | None,
                                 tuple[float, float] | None]],
            fmt: str, note: str) -> str:
    """One row each: a dot at the value, a whisker from low to high and, when given, a box
    (the quartiles). ``fmt``: usd | num | ratio."""
    known = [v for _, m, lo, hi, _ in rows for v in (m, lo, hi) if v is not None]
    if not known:
        return svg.na_figure(name, caption, "no values")
    top = max(max(known), 1e-9) * 1.08
    rh = 22
    sx = svg.linear(0, top, LEFT, WIDTH - 70)
    h = 30 + len(rows) * rh + 8
    show: Callable[[float | None], str] = {"usd": usd, "num": _num, "ratio": _ratio}[fmt]
    body = []
    for t in svg.nice_ticks(0, top, 5):
        if t <= top:
            body += [svg.line(sx(t), 22, sx(t), h - 6),
                     svg.text(sx(t), 14, show(t), "middle", "axis")]
    for k, (label, mid, lo, hi, box) in enumerate(rows):
        y = 28 + k * rh + rh / 2
        body.append(svg.text(LEFT - 8, y + 4, short(label, 34), "end", "axis"))
        if mid is None:
            body.append(svg.text(LEFT + 4, y + 4, "n/a", "start", "na-label"))
            continue
        if lo is not None and hi is not None:
            body.append(svg.line(sx(lo), y, sx(hi), y, "whisker"))
        if box is not None:
            body.append(svg.rect(sx(box[0]), y - 5, max(sx(box[1]) - sx(box[0]), 1), 10,
                                 "#9ecae1", "mark bar", f"{label}: quartiles {show(box[0])}"
                                 f"–{show(box[1])}"))
        tip = f"{label}: {show(mid)}" + (f" (min {show(lo)}, max {show(hi)})"
                                          if lo is not None and hi is not None else "")
        body.append(svg.rect(sx(mid) - 2, y - 6, 4, 12, "#08306b", "mark", tip))
        body.append(svg.text(sx(hi if hi is not None else mid) + 6, y + 4, show(mid), "start",
                             "bar-label"))
    return svg.figure(name, caption, svg.svg(name, WIDTH, h, body, caption), note)


def funnel_levels(report: FunnelReport) -> str:
    rows = [(r.label, [None if r.summary is None else getattr(r.summary, k) for k, _ in LEVELS])
            for r in report.rows]
    return _grouped("funnel", "Funnel per configuration (ranked by SM)", rows,
                    [n for _, n in LEVELS], LEVEL_COLORS,
                    f"{len(report.tasks)} tasks; SM n/a without a judge model")


def complexity(report: FunnelReport) -> str:
    name, caption = "complexity", "RQ2: SM by oracle size (LOC bucket)"
    labels = _labels(report)
    rows = [(labels.get(cid, cid), [None if c.buckets.get(b) is None else c.buckets[b].sm
                                    for b in BUCKETS])
            for cid, c in report.complexity.items() if cid != "all"]
    if not rows:
        return svg.na_figure(name, caption, "no repository with an oracle size")
    pooled = report.complexity.get("all")
    trend = ""
    if pooled is not None and pooled.slope_per_decade is not None:
        trend = f"pooled trend: {pooled.slope_per_decade:+.3f} SM per ×10 oracle LOC"
    figure = _grouped(name, caption, rows, BUCKETS, [svg.TIER_COLORS[b] for b in BUCKETS],
                      "easy ≤ 1500 < medium < 4000 ≤ hard oracle LOC" + (f"; {trend}"
                                                                         if trend else ""))
    if pooled is None or len(pooled.loess) < 2:
        return figure
    return figure + _trend(pooled.loess)


def _trend(points: Sequence[tuple[float, float]]) -> str:
    """The pooled LOESS fit of SM against log10 oracle LOC, as a line."""
    name, caption = "complexity-trend", "RQ2: SM against oracle LOC (pooled LOESS)"
    xs = [math.log10(max(x, 1.0)) for x, _ in points]
    lo, hi = min(xs), max(xs)
    if hi - lo < 1e-9:
        return ""
    w, h, left, bottom = WIDTH, 220, 60, 190
    sx = svg.linear(lo, hi, left, w - 30)
    sy = svg.linear(0, 1, bottom, 20)
    body = []
    for v in (0, 0.5, 1.0):
        body += [svg.line(left, sy(v), w - 30, sy(v)), svg.text(left - 6, sy(v) + 4, pct(v),
                                                                 "end", "axis")]
    for t in svg.log_ticks(10 ** lo, 10 ** hi):
        body.append(svg.text(sx(math.log10(t)), bottom + 16, f"{t:,.0f}", "middle", "axis"))
    path = " ".join(f"{'M' if i == 0 else 'L'}{svg.f(sx(x))},{svg.f(sy(y))}"
                    for i, (x, (_, y)) in enumerate(zip(xs, points, strict=True)))
    body.append(f'<path class="trend" d="{path}" fill="none" stroke="#08306b" '
                'stroke-width="2"/>')
    return svg.figure(name, caption, svg.svg(name, w, h, body, caption),
                      "x: oracle LOC (log scale); y: the fitted SM")


def cost(report: FunnelReport) -> str:
    labels = _labels(report)
    rows = [(labels.get(cid, cid), c.usd.mean, c.usd.min, c.usd.max, None)
            for cid, c in report.cost.items()]
    return _ranges("funnel-cost", "RQ3: USD per repository (mean, min–max)", rows, "usd",
                   "Table 3; the whisker spans the cheapest and the dearest repository")


def structure(report: FunnelReport) -> str:
    labels = {**_labels(report), "oracle": "oracle"}
    rows = [(labels.get(cid, cid), s.files.median, s.files.min, s.files.max,
             None if s.files.q1 is None or s.files.q3 is None else (s.files.q1, s.files.q3))
            for cid, s in report.structure.items()]
    return _ranges("funnel-structure", "RQ4: files written per repository", rows, "num",
                   "Fig. 5; mark = median, box = quartiles, whisker = range")


def robustness(report: FunnelReport) -> str:
    name, caption = "funnel-robustness", "Robustness on negative cases"
    labels = _labels(report)
    rows = [(labels.get(cid, cid), [r.negative_exit_agree, r.negative_output_match])
            for cid, r in report.robustness.items()]
    if not any(v is not None for _, vals in rows for v in vals):
        return svg.na_figure(name, caption, "no negative case was scored for a candidate "
                             "(none generated, or imported results without them)")
    return _grouped(name, caption, rows, ["exit code agrees", "error output matches"],
                    ["#6baed6", "#08306b"], "§5.1: the oracle's negative cases, scored for the "
                    "candidate")


def runtime(report: FunnelReport) -> str:
    """Over the tasks every configuration ran (Table 4's common subset) when there are such,
    else over each configuration's own built-and-executed repositories (said in the note)."""
    caption = "Runtime: candidate / oracle time per command"
    rt = report.runtime
    if rt is None:
        return svg.na_figure("funnel-runtime", caption, "no timed command")
    common = bool(rt.common_tasks) and any(r.ratio is not None for r in rt.common.values())
    table = rt.common if common else rt.own
    if not any(r.ratio is not None for r in table.values()):
        return svg.na_figure("funnel-runtime", caption, "no repository built, ran and was timed")
    labels = _labels(report)
    rows = [(labels.get(cid, cid), r.ratio, None, None, None) for cid, r in table.items()]
    over = (f"over the {len(rt.common_tasks)} task(s) every configuration built and executed"
            if common else "no task that every configuration ran: each over its own built, "
            "executed and timed repositories")
    return _ranges("funnel-runtime", caption, rows, "ratio",
                   f"Table 4; {over}; 1.00× = as fast as the oracle")


def section(report: FunnelReport | None) -> str:
    """The section, or "" when the runs hold no differential test."""
    if report is None or not report.tasks:
        return ""
    figs = [funnel_levels(report), complexity(report), cost(report), structure(report),
            robustness(report), runtime(report)]
    return ('<section id="funnel"><h2>CLI generation (differential testing)</h2>'
            f'<div class="figs">{"".join(figs)}</div></section>')

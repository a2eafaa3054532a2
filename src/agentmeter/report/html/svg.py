"""Small SVG building blocks for the report's charts (no external library).

Every data mark carries the class ``mark`` (tests count them) and a ``<title>`` tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agentmeter.report.html.fmt import esc

Scale = Callable[[float], float]

#: sequential palettes (low -> high); "good" is blue, "cost" runs from pale to deep orange
PALETTES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "good": ((239, 243, 255), (107, 174, 214), (8, 69, 148)),
    "cost": ((255, 245, 235), (253, 141, 60), (166, 54, 3)),
}
STATUS_COLORS = {"passed": "#2e9d4b", "failed": "#d64545", "agent_error": "#b9770e",
                 "timeout": "#8e44ad", "budget_exceeded": "#c0392b", "infra_invalid": "#95a5a6",
                 "missing": "#e5e7eb", "running": "#3b82f6", "pending": "#cbd5e1"}
TIER_COLORS = {"easy": "#74c476", "medium": "#fd8d3c", "hard": "#de2d26"}


def f(x: float) -> str:
    """A compact coordinate."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


def linear(d0: float, d1: float, r0: float, r1: float) -> Scale:
    span = (d1 - d0) or 1.0
    return lambda v: r0 + (v - d0) / span * (r1 - r0)


def log10_scale(d0: float, d1: float, r0: float, r1: float) -> Scale:
    l0, l1 = math.log10(d0), math.log10(d1)
    inner = linear(l0, l1, r0, r1)
    return lambda v: inner(math.log10(max(v, d0)))


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)]


def color(t: float, palette: str = "good") -> str:
    """Colour at position t in [0, 1] of a palette."""
    stops = PALETTES[palette]
    t = min(max(t, 0.0), 1.0) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    u = t - i
    rgb = (round(a + (b - a) * u) for a, b in zip(stops[i], stops[i + 1], strict=True))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def ink(background: str) -> str:
    """Black or white text, whichever reads on the background colour."""
    r, g, b = (int(background[k:k + 2], 16) for k in (1, 3, 5))
    return "#111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def title(text: str) -> str:
    return f"<title>{esc(text)}</title>"


def text(x: float, y: float, s: str, anchor: str = "start", cls: str = "",
         extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{f(x)}" y="{f(y)}" text-anchor="{anchor}"{c}{extra}>{esc(s)}</text>')


def rect(x: float, y: float, w: float, h: float, fill: str, cls: str = "mark",
         tip: str = "", extra: str = "") -> str:
    body = title(tip) if tip else ""
    return (f'<rect class="{cls}" x="{f(x)}" y="{f(y)}" width="{f(max(w, 0))}" '
            f'height="{f(max(h, 0))}" fill="{fill}"{extra}>{body}</rect>')


def line(x1: float, y1: float, x2: float, y2: float, cls: str = "grid") -> str:
    return f'<line class="{cls}" x1="{f(x1)}" y1="{f(y1)}" x2="{f(x2)}" y2="{f(y2)}"/>'


def svg(name: str, width: float, height: float, body: Sequence[str], label: str) -> str:
    return (f'<svg class="chart" data-chart="{esc(name)}" viewBox="0 0 {f(width)} {f(height)}" '
            f'width="{f(width)}" height="{f(height)}" role="img" aria-label="{esc(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>')


def figure(name: str, caption: str, chart: str, note: str = "") -> str:
    extra = f'<p class="chart-note">{note}</p>' if note else ""
    return (f'<figure class="fig" id="fig-{esc(name)}"><figcaption>{esc(caption)}</figcaption>'
            f'<div class="chart-wrap">{chart}</div>{extra}</figure>')


def na_figure(name: str, caption: str, why: str) -> str:
    """A chart that cannot be drawn: an explicit n/a with the reason, never an error."""
    return (f'<figure class="fig na-fig" id="fig-{esc(name)}" data-chart-na="{esc(name)}">'
            f'<figcaption>{esc(caption)}</figcaption><p class="na">n/a — {esc(why)}</p></figure>')

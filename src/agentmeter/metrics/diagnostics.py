"""Conventional diagnostics (AgentMeter §4.1, §5.1–5.2): Pass/N, Tok/Pass, USD/Pass, Δbest,
best/worst agent per model, and the winner under each criterion."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agentmeter.metrics.scorecard import ConfigRow, ModelSummary, Winners


def per_pass(total: float | None, passes: int) -> float | None:
    """Total spend divided by successes; n/a without a success or with unknown spend."""
    if total is None or passes <= 0 or math.isnan(total):
        return None
    return total / passes


def delta_best(ams: Sequence[float | None], models: Sequence[str]) -> list[float | None]:
    """Same-model gap to the best agent: max AMS over the model's configs − AMS(c)."""
    best: dict[str, float] = {}
    for a, m in zip(ams, models, strict=True):
        if a is not None:
            best[m] = max(best.get(m, a), a)
    return [None if a is None or m not in best else best[m] - a
            for a, m in zip(ams, models, strict=True)]


def model_summaries(rows: Sequence[ConfigRow]) -> list[ModelSummary]:
    """Best and worst agent per model (ties: first in row order); models with no AMS omitted."""
    by_model: dict[str, list[ConfigRow]] = {}
    for r in rows:
        if r.ams is not None:
            by_model.setdefault(r.model, []).append(r)
    out = []
    for model, rs in by_model.items():
        best = max(rs, key=lambda r: r.ams or 0.0)
        worst = min(rs, key=lambda r: r.ams or 0.0)
        assert best.ams is not None and worst.ams is not None
        out.append(ModelSummary(model=model, best_agent=best.agent, best_config=best.config_id,
                                best_ams=best.ams, worst_agent=worst.agent,
                                worst_config=worst.config_id, worst_ams=worst.ams,
                                spread=best.ams - worst.ams))
    return out


def _argbest(rows: Sequence[ConfigRow], value: Callable[[ConfigRow], float | None],
             highest: bool, rel: float = 1e-12) -> list[str]:
    vals = [(r.config_id, value(r)) for r in rows]
    known = [(c, v) for c, v in vals if v is not None]
    if not known:
        return []
    target = max(v for _, v in known) if highest else min(v for _, v in known)
    return [c for c, v in known if math.isclose(v, target, rel_tol=rel, abs_tol=1e-15)]


def winners(rows: Sequence[ConfigRow]) -> Winners:
    return Winners(
        passes=_argbest(rows, lambda r: float(r.passes) if r.n_scored else None, True),
        tok_per_pass=_argbest(rows, lambda r: r.tok_per_pass, False),
        usd_per_pass=_argbest(rows, lambda r: r.usd_per_pass, False),
        ams=_argbest(rows, lambda r: r.ams, True),
    )

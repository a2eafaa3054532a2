"""CLI-Tool-Bench's analyses beyond the funnel table (paper 001, §4–5), over one selected trial per
(configuration, task) — a repository:

- ``complexity`` (RQ2, Fig. 3): SM per difficulty bucket of the oracle's LOC (easy ≤ 1500 <
  medium < 4000 ≤ hard) and the trend of SM against log10(oracle LOC): a LOESS curve (local
  linear fit, tricube weights, span 2/3, as the paper's dashed line) at the bucket bounds, and
  the least-squares slope per decade of LOC;
- ``cost`` (RQ3, Table 3): mean, min and max per repository of steps, prompt and completion
  tokens (K) and USD;
- ``structure`` (RQ4, Fig. 5): the distribution (min, quartiles, max, mean) of files and lines
  the agent wrote per repository, and the oracles' beside them;
- ``robustness`` (§5.1, "Robustness to Invalid Inputs": positive vs negative commands): Exec on
  the valid (positive) cases against the negative cases (the oracle exited non-zero), where the
  candidate must fail too (exit-code agreement) and in addition print what the oracle printed
  (merged stdout+stderr fuzzy-matches, τ = 0.8). A failed build scores 0 (Eq. 4's rule);
- ``runtime`` (§5.1, Table 4): oracle vs candidate milliseconds per command and their ratio,
  over the repositories every configuration built and executed (the paper's subset), and over
  each configuration's own built-and-executed repositories;
- ``models`` (Table 2): per model the average over its configurations (frameworks) of the
  configuration means, and per agent the average over its models (the bottom row).

Pure functions over :class:`Repo` rows (see ``from_store.funnel_report``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, Field

#: the paper's tier bounds on oracle LOC (Table 1; the importer's tier_of)
EASY_MAX_LOC = 1500
HARD_MIN_LOC = 4000
LOESS_SPAN = 2 / 3


def tier_of(oracle_loc: int) -> str:
    if oracle_loc <= EASY_MAX_LOC:
        return "easy"
    return "hard" if oracle_loc >= HARD_MIN_LOC else "medium"


@dataclass
class Repo:
    """One repository of one configuration: what the analyses read."""

    task: str
    build: bool
    exec: float | None
    sm: float | None
    fm: float | None
    oracle_loc: int | None = None
    steps: float | None = None
    prompt_ktok: float | None = None
    completion_ktok: float | None = None
    usd: float | None = None
    files: int | None = None
    loc: int | None = None
    oracle_files: int | None = None
    negative_cases: float | None = None
    negative_exit_agree: float | None = None
    negative_output_match: float | None = None
    oracle_ms: float | None = None
    candidate_ms: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


class Stat(BaseModel):
    n: int
    mean: float | None
    min: float | None
    max: float | None


def stat(vals: Sequence[float | None]) -> Stat:
    xs = [float(v) for v in vals if v is not None]
    if not xs:
        return Stat(n=0, mean=None, min=None, max=None)
    return Stat(n=len(xs), mean=sum(xs) / len(xs), min=min(xs), max=max(xs))


class Distribution(Stat):
    q1: float | None = None
    median: float | None = None
    q3: float | None = None


def distribution(vals: Sequence[float | None]) -> Distribution:
    xs = [float(v) for v in vals if v is not None]
    s = stat(xs)
    if not xs:
        return Distribution(**s.model_dump())
    q1, med, q3 = (float(q) for q in np.percentile(xs, [25, 50, 75]))
    return Distribution(**s.model_dump(), q1=q1, median=med, q3=q3)


# --- RQ2 ---------------------------------------------------------------------------------------

class Bucket(BaseModel):
    n: int
    mean_loc: float | None
    sm: float | None
    fm: float | None


class Complexity(BaseModel):
    buckets: dict[str, Bucket] = Field(description="easy / medium / hard by oracle LOC")
    loess: list[tuple[float, float]] = Field(
        default_factory=list, description="(oracle LOC, fitted SM) at the bucket bounds and the "
        "range's ends: LOESS of SM on log10(LOC), span 2/3")
    slope_per_decade: float | None = Field(
        None, description="least-squares slope of SM per ×10 oracle LOC")
    n: int = 0


def loess(x: np.ndarray, y: np.ndarray, at: Sequence[float], span: float = LOESS_SPAN
          ) -> list[float]:
    """Local linear regression with tricube weights over the nearest ⌈span·n⌉ points."""
    n = len(x)
    k = max(2, min(n, math.ceil(span * n)))
    out = []
    for x0 in at:
        d = np.abs(x - x0)
        h = np.sort(d)[k - 1] or 1e-12
        w = np.clip(1 - (d / (h * 1.000001)) ** 3, 0, None) ** 3
        sw = w.sum()
        mx, my = (w * x).sum() / sw, (w * y).sum() / sw
        var = (w * (x - mx) ** 2).sum()
        beta = 0.0 if var <= 1e-12 else (w * (x - mx) * (y - my)).sum() / var
        out.append(float(my + beta * (x0 - mx)))
    return out


def complexity(repos: Sequence[Repo]) -> Complexity:
    pts = [(r.oracle_loc, r.sm, r.fm) for r in repos if r.oracle_loc is not None and r.oracle_loc > 0]
    groups: dict[str, list[tuple[int, float | None, float | None]]] = {}
    for p in pts:
        groups.setdefault(tier_of(p[0]), []).append(p)
    buckets = {}
    for tier in ("easy", "medium", "hard"):
        g = groups.get(tier, [])
        buckets[tier] = Bucket(n=len(g), mean_loc=stat([float(p[0]) for p in g]).mean,
                               sm=_mean([p[1] for p in g]), fm=_mean([p[2] for p in g]))
    known = [(math.log10(p[0]), p[1]) for p in pts if p[1] is not None]
    out = Complexity(buckets=buckets, n=len(pts), slope_per_decade=None)
    if len({x for x, _ in known}) >= 3:
        x = np.array([p[0] for p in known])
        y = np.array([float(p[1]) for p in known if p[1] is not None])
        at = sorted({float(x.min()), math.log10(EASY_MAX_LOC), math.log10(HARD_MIN_LOC),
                     float(x.max())})
        at = [a for a in at if x.min() <= a <= x.max()]
        fitted = loess(x, y, at)
        out.loess = [(round(10 ** a, 1), min(1.0, max(0.0, v)))
                     for a, v in zip(at, fitted, strict=True)]
        out.slope_per_decade = float(np.polyfit(x, y, 1)[0])
    return out


def _mean(vals: Sequence[float | None]) -> float | None:
    """Mean, n/a when empty or any value unknown."""
    if not vals or any(v is None for v in vals):
        return None
    return sum(float(v) for v in vals if v is not None) / len(vals)


# --- RQ3 ---------------------------------------------------------------------------------------

class Cost(BaseModel):
    steps: Stat
    prompt_ktok: Stat
    completion_ktok: Stat
    usd: Stat


def cost(repos: Sequence[Repo]) -> Cost:
    return Cost(steps=stat([r.steps for r in repos]), prompt_ktok=stat([r.prompt_ktok for r in repos]),
                completion_ktok=stat([r.completion_ktok for r in repos]),
                usd=stat([r.usd for r in repos]))


# --- RQ4 ---------------------------------------------------------------------------------------

class Structure(BaseModel):
    files: Distribution
    loc: Distribution


def structure(repos: Sequence[Repo]) -> Structure:
    return Structure(files=distribution([r.files for r in repos]),
                     loc=distribution([r.loc for r in repos]))


def oracle_structure(repos: Sequence[Repo]) -> Structure:
    """The oracles' structure, once per task."""
    seen: dict[str, Repo] = {}
    for r in repos:
        seen.setdefault(r.task, r)
    return Structure(files=distribution([r.oracle_files for r in seen.values()]),
                     loc=distribution([r.oracle_loc for r in seen.values()]))


# --- §5.1 robustness ---------------------------------------------------------------------------

class Robustness(BaseModel):
    n: int = Field(description="repositories with negative cases (or a failed build)")
    positive_exec: float | None = Field(description="mean Exec on the valid (positive) cases, "
                                        "over the same repositories")
    negative_exit_agree: float | None
    negative_output_match: float | None
    negative_cases: int = 0


def robustness(repos: Sequence[Repo], measured: bool | None = None) -> Robustness:
    """n/a (n = 0) when negative cases were not measured (``measured``: some repository of the
    report has negative-case results; default: some of ``repos`` has; an imported run has
    none). A configuration whose every build failed then scores 0."""
    if measured is None:
        measured = any(r.negative_cases is not None for r in repos)
    if not measured:
        return Robustness(n=0, positive_exec=None, negative_exit_agree=None,
                          negative_output_match=None)
    rows = [r for r in repos if not r.build or (r.negative_cases or 0) > 0]
    agree = [r.negative_exit_agree if r.build else 0.0 for r in rows]
    match = [r.negative_output_match if r.build else 0.0 for r in rows]
    return Robustness(n=len(rows), positive_exec=_mean([r.exec if r.build else 0.0 for r in rows]),
                      negative_exit_agree=_mean(agree) if rows else None,
                      negative_output_match=_mean(match) if rows else None,
                      negative_cases=int(sum(r.negative_cases or 0 for r in rows)))


# --- §5.1 runtime ------------------------------------------------------------------------------

class Runtime(BaseModel):
    n: int
    oracle_ms: float | None
    candidate_ms: float | None
    ratio: float | None = Field(description="candidate / oracle (the relative slowdown)")


def _runtime(repos: Sequence[Repo]) -> Runtime:
    rows = [r for r in repos if r.oracle_ms is not None and r.candidate_ms is not None]
    o, c = _mean([r.oracle_ms for r in rows]), _mean([r.candidate_ms for r in rows])
    return Runtime(n=len(rows), oracle_ms=o, candidate_ms=c,
                   ratio=None if o is None or c is None or o <= 0 else c / o)


def ran(r: Repo) -> bool:
    """Built, executed (Exec > 0) and timed."""
    return r.build and (r.exec or 0) > 0 and r.oracle_ms is not None and r.candidate_ms is not None


class RuntimeTable(BaseModel):
    common_tasks: list[str] = Field(description="tasks every configuration built and executed")
    common: dict[str, Runtime] = Field(description="config id -> over the common tasks")
    oracle_common_ms: float | None = Field(description="the oracle's mean over the common "
                                           "tasks, all configurations' measurements")
    own: dict[str, Runtime] = Field(description="config id -> over its own built-and-executed "
                                    "repositories")


def runtime(by_config: dict[str, Sequence[Repo]]) -> RuntimeTable:
    ok = [{r.task for r in repos if ran(r)} for repos in by_config.values()]
    common = sorted(set.intersection(*ok)) if ok else []
    keep = set(common)
    common_rows = {cid: _runtime([r for r in repos if r.task in keep and ran(r)])
                   for cid, repos in by_config.items()}
    oracle_all = [r.oracle_ms for repos in by_config.values() for r in repos
                  if r.task in keep and ran(r)]
    return RuntimeTable(common_tasks=common, common=common_rows,
                        oracle_common_ms=_mean(oracle_all) if oracle_all else None,
                        own={cid: _runtime([r for r in repos if ran(r)])
                             for cid, repos in by_config.items()})


# --- Table 2 -----------------------------------------------------------------------------------

LEVELS = ("build", "exec", "em", "fm", "sm")


class Average(BaseModel):
    configs: list[str]
    build: float | None = None
    exec: float | None = None
    em: float | None = None
    fm: float | None = None
    sm: float | None = None


def averages(groups: dict[str, list[tuple[str, dict[str, float | None]]]]) -> dict[str, Average]:
    """group -> the plain mean over its configurations of each configuration's mean (Table 2's
    "Average (Both Frameworks)" columns and "Average" row)."""
    out = {}
    for g, rows in sorted(groups.items()):
        out[g] = Average(configs=[cid for cid, _ in rows],
                         **{lv: _mean([s.get(lv) for _, s in rows]) for lv in LEVELS})
    return out

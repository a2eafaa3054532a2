"""CLI-Tool-Bench evaluation funnel (paper 001, §2.3.3 and §3.2), as pure functions over
per-case differential-test results.

Per test case whose *oracle exits 0* (the valid functional paths; other cases are left out):
- Exec: the candidate exits 0;
- a case is comparable iff Exec holds and the file-system side effects equal the oracle's;
- EM: comparable and stdout equal after removing all whitespace;
- FM: comparable and (EM or normalized Levenshtein similarity of stdout ≥ 0.8), computed with
  rapidfuzz (similarity 1 − d/max(|a|, |b|), 1.0 for two empty strings);
- SM (the paper's definition, the default): comparable and (EM or the LLM judge says the payloads
  are equivalent) — the judge is not asked when EM holds. SM is *not* "FM or judge": in the
  released data ``sm`` is often below ``fm`` (docs/metrics.md). Two variants are kept for
  comparison: ``sm_fm`` = comparable and (FM or judge); ``sm_nogate`` = Exec and (stdout equal
  after removing whitespace, or judge), not gated by the side effects.
Per command class the pass rate is the mean indicator; a repository's score is the macro
average over its command classes, and 0 when the build (installation) failed. Build is the
binary installation success. SM is n/a when a judge verdict it needs is missing. The share
of comparable cases (Exec and equal side effects) is reported as ``side_effects``.

:func:`score_from_rates` starts from per-class pass rates a differential-testing verifier
already computed (its reward.json, docs/metrics.md); :func:`repository_score` from the cases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz.distance import Levenshtein

FUZZY_THRESHOLD = 0.8
_WS = re.compile(r"\s+")


class CaseResult(BaseModel):
    """One differential test case: oracle vs candidate."""

    model_config = ConfigDict(extra="forbid")

    case_id: str
    command_class: str
    oracle_exit: int
    candidate_exit: int | None = Field(description="None: the candidate did not run")
    side_effects_equal: bool = Field(description="FS diffs equal (hidden paths ignored)")
    oracle_stdout: str = ""
    candidate_stdout: str = ""
    semantic_equal: bool | None = Field(default=None, description="LLM judge verdict, if asked")


class CaseVerdict(BaseModel):
    exec: bool
    comparable: bool
    em: bool
    fm: bool
    sm: bool | None
    sm_fm: bool | None = None
    sm_nogate: bool | None = None


def exact_match(a: str, b: str) -> bool:
    """Equal after stripping every whitespace character."""
    return _WS.sub("", a) == _WS.sub("", b)


#: rapidfuzz's banded distance is cheapest up to 31 edits (one machine word per row)
_FIRST_BAND = 31


def levenshtein(a: str, b: str, cap: int | None = None) -> int:
    """Edit distance (insert/delete/substitute = 1), by rapidfuzz. With ``cap``, any distance
    above it is reported as cap + 1; the bound is searched upwards from a small band (rapidfuzz's
    cost grows with the bound), so near-equal long outputs cost little."""
    if cap is None:
        return int(Levenshtein.distance(a, b))
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    band = min(_FIRST_BAND, cap)
    while True:
        d = int(Levenshtein.distance(a, b, score_cutoff=band))
        if d <= band or band >= cap:
            return min(d, cap + 1)
        band = min(band * 8, cap)


def similarity(a: str, b: str) -> float:
    """Normalized Levenshtein similarity 1 − d/max(|a|, |b|); 1.0 for two empty strings."""
    return float(Levenshtein.normalized_similarity(a, b))


def _histogram_bound(a: str, b: str) -> int:
    """A lower bound of the edit distance from byte histograms: one edit moves a character's
    bytes (≤ 4 in UTF-8, 1 in ASCII) out of one bin and into another."""
    ea, eb = a.encode(), b.encode()
    width = 1 if len(ea) == len(a) and len(eb) == len(b) else 4
    ha = np.bincount(np.frombuffer(ea, dtype=np.uint8), minlength=256)
    hb = np.bincount(np.frombuffer(eb, dtype=np.uint8), minlength=256)
    return int(np.abs(ha - hb).sum()) // (2 * width)


def fuzzy_match(a: str, b: str, threshold: float = FUZZY_THRESHOLD) -> bool:
    """similarity(a, b) ≥ threshold, without computing distances beyond the threshold; long
    outputs whose byte histograms already differ too much are rejected without it."""
    if a == b:
        return True
    m = max(len(a), len(b))
    cap = int((1.0 - threshold) * m + 1e-9)  # largest distance still meeting the threshold
    if cap > _FIRST_BAND:
        if Levenshtein.distance(a, b, score_cutoff=_FIRST_BAND) <= _FIRST_BAND:
            return True  # near-equal: settled by the cheap narrow band
        if _histogram_bound(a, b) > cap:
            return False
        if _line_aligned_bound(a, b, cap) <= cap:
            return True  # scattered edits in aligned lines: an upper bound already fits
    return levenshtein(a, b, cap=cap) <= cap


def _line_aligned_bound(a: str, b: str, cap: int) -> int:
    """An upper bound of the edit distance (above ``cap`` once it exceeds it): align the two
    texts by whole lines, then add the distances of the differing blocks (editing each block
    alone turns ``a`` into ``b``)."""
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    total = 0
    for op in Levenshtein.opcodes(la, lb):
        if op.tag == "equal":
            continue
        left, right = "".join(la[op.src_start:op.src_end]), "".join(lb[op.dest_start:op.dest_end])
        total += int(Levenshtein.distance(left, right, score_cutoff=cap - total + 1))
        if total > cap:
            return cap + 1
    return total


def side_effects_pass(executed: bool, equal: bool) -> bool:
    """The one definition of the side-effect level, per case and per class alike: the candidate
    exited 0 and its file-system changes equal the oracle's (a case "comparable", §3.2.1)."""
    return executed and equal


def verdict(case: CaseResult, threshold: float = FUZZY_THRESHOLD) -> CaseVerdict:
    """The case's indicators. A judge verdict is needed (None when missing: that level is n/a)
    for ``sm`` on comparable non-EM cases, for ``sm_fm`` on comparable non-FM cases and for
    ``sm_nogate`` on executed cases whose stdout differs beyond whitespace."""
    ex = case.candidate_exit == 0
    comparable = side_effects_pass(ex, case.side_effects_equal)
    same = ex and exact_match(case.oracle_stdout, case.candidate_stdout)
    em = comparable and same
    fm = comparable and (em or fuzzy_match(case.oracle_stdout, case.candidate_stdout, threshold))
    judge = case.semantic_equal
    return CaseVerdict(exec=ex, comparable=comparable, em=em, fm=fm,
                       sm=_either(comparable, em, judge), sm_fm=_either(comparable, fm, judge),
                       sm_nogate=_either(ex, same, judge))


def _either(gate: bool, matched: bool, judge: bool | None) -> bool | None:
    """gate ∧ (matched ∨ judge): False outside the gate, True when matched, else the verdict."""
    if not gate:
        return False
    return True if matched else judge


class FunnelScore(BaseModel):
    """One repository (generated tool). Scores in [0, 1]; None = n/a. ``per_class`` holds the
    Exec/EM/FM/SM pass rates (and the SM variants) per command class; ``side_effects``
    (comparable: Exec and equal side effects) is reported macro-averaged only."""

    build: bool
    exec: float | None
    side_effects: float | None = None
    em: float | None
    fm: float | None
    sm: float | None
    sm_fm: float | None = Field(default=None, description="variant: comparable ∧ (FM ∨ judge)")
    sm_nogate: float | None = Field(default=None, description="variant: Exec ∧ (EM ∨ judge)")
    per_class: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    n_cases: int = 0
    n_classes: int = 0


METRICS = ("exec", "em", "fm", "sm")
#: the funnel levels, outermost first: exec ≥ side_effects ≥ em; em ≤ fm and em ≤ sm, with no
#: order between fm and sm (SM is comparable ∧ (EM ∨ judge), not FM ∨ judge)
LEVELS = ("exec", "side_effects", "em", "fm", "sm")
#: the SM variants kept beside the paper's SM (named, not funnel levels)
VARIANTS = ("sm_fm", "sm_nogate")
_ALL = (*LEVELS, *VARIANTS)


def _macro(per_class: dict[str, dict[str, float | None]], level: str) -> float | None:
    vals = [r.get(level) for r in per_class.values()]
    if not vals or any(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None) / len(vals)


def _failed(n_cases: int, n_classes: int = 0) -> FunnelScore:
    return FunnelScore(build=False, exec=0.0, side_effects=0.0, em=0.0, fm=0.0, sm=0.0,
                       sm_fm=0.0, sm_nogate=0.0, n_cases=n_cases, n_classes=n_classes)


def score_from_rates(build_ok: bool, class_rates: dict[str, dict[str, float | None]],
                     n_cases: int = 0) -> FunnelScore:
    """Eq. 4 from per-class pass rates already computed (e.g. by a verifier; keys of
    :data:`LEVELS` and :data:`VARIANTS`, a missing or None level is n/a): macro average over
    classes, all zero when the build failed."""
    if not build_ok:
        return _failed(n_cases, len(class_rates))
    per_class = {cls: {m: class_rates[cls].get(m) for m in (*METRICS, *VARIANTS)}
                 for cls in sorted(class_rates)}
    macro = {m: _macro(class_rates, m) for m in _ALL}
    return FunnelScore(build=True, **macro, per_class=per_class, n_cases=n_cases,
                       n_classes=len(per_class))


def repository_score(build_ok: bool, cases: Sequence[CaseResult],
                     threshold: float = FUZZY_THRESHOLD) -> FunnelScore:
    """Eq. 3–4: per-class pass rates, macro-averaged; all zero when the build failed."""
    valid = [c for c in cases if c.oracle_exit == 0]
    by_class: dict[str, list[CaseVerdict]] = {}
    for c in valid:
        by_class.setdefault(c.command_class, []).append(verdict(c, threshold))
    rates: dict[str, dict[str, float | None]] = {}
    for cls, vs in by_class.items():
        rates[cls] = {}
        for m in _ALL:
            attr = "comparable" if m == "side_effects" else m
            vals = [getattr(v, attr) for v in vs]
            rates[cls][m] = None if any(x is None for x in vals) else sum(vals) / len(vals)
    if not build_ok:
        return _failed(len(valid))
    return score_from_rates(True, rates, n_cases=len(valid))


#: z of the two-sided 90 % normal interval the CLI-Tool-Bench leaderboard reports
Z90 = 1.645


class FunnelSummary(BaseModel):
    """Averages over repositories (the paper's table values), with the publisher's statistics
    of the per-repository SM: sample SD (n − 1) and the 90 % normal half-width
    1.645·SD/√n (n/a below two repositories)."""

    n: int
    build: float | None
    exec: float | None
    side_effects: float | None = None
    em: float | None
    fm: float | None
    sm: float | None
    sm_fm: float | None = None
    sm_nogate: float | None = None
    sm_sd: float | None = Field(default=None, description="SD of per-repository SM (n − 1)")
    sm_ci90: float | None = Field(default=None, description="half-width 1.645·SD/√n")


def sample_sd(vals: Sequence[float | None]) -> float | None:
    """Standard deviation with n − 1; None when a value is unknown or n < 2."""
    if len(vals) < 2 or any(v is None for v in vals):
        return None
    xs = [float(v) for v in vals if v is not None]
    mu = sum(xs) / len(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))


def summarize(scores: Sequence[FunnelScore]) -> FunnelSummary:
    def mean(vals: list[float | None]) -> float | None:
        if not vals or any(v is None for v in vals):
            return None
        return sum(v for v in vals if v is not None) / len(vals)

    sd = sample_sd([s.sm for s in scores])
    return FunnelSummary(n=len(scores), build=mean([float(s.build) for s in scores]),
                         **{m: mean([getattr(s, m) for s in scores]) for m in _ALL},
                         sm_sd=sd, sm_ci90=None if sd is None else Z90 * sd / math.sqrt(len(scores)))

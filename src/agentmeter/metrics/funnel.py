"""CLI-Tool-Bench evaluation funnel (paper 001, §2.3.3 and §3.2), as pure functions over
per-case differential-test results.

Per test case whose *oracle exits 0* (the valid functional paths; other cases are left out):
- Exec: the candidate exits 0;
- a case is comparable iff Exec holds and the file-system side effects equal the oracle's;
- EM: comparable and stdout equal after removing all whitespace;
- FM: comparable and (EM or normalized Levenshtein similarity of stdout ≥ 0.8);
- SM: comparable and (FM or the LLM judge says the payloads are equivalent).
Per command class the pass rate is the mean indicator; a repository's score is the macro
average over its command classes, and 0 when the build (installation) failed. Build is the
binary installation success. SM is n/a when a judge verdict it needs is missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

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


def exact_match(a: str, b: str) -> bool:
    """Equal after stripping every whitespace character."""
    return _WS.sub("", a) == _WS.sub("", b)


def levenshtein(a: str, b: str, cap: int | None = None) -> int:
    """Edit distance (insert/delete/substitute = 1). With ``cap``, any distance above it is
    reported as cap + 1 (banded computation, O(len·cap))."""
    if len(a) < len(b):
        a, b = b, a
    if cap is not None and len(a) - len(b) > cap:
        return cap + 1
    if not b:
        return len(a)
    prev = list(range(len(b) + 1))
    big = len(a) + len(b) + 1
    for i, ca in enumerate(a, 1):
        lo = 1 if cap is None else max(1, i - cap)
        hi = len(b) if cap is None else min(len(b), i + cap)
        cur = [big] * (len(b) + 1)
        cur[0] = i if (cap is None or i <= cap) else big
        for j in range(lo, hi + 1):
            cost = 0 if ca == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        if cap is not None and min(cur[max(0, lo - 1):hi + 1]) > cap:
            return cap + 1
        prev = cur
    return prev[len(b)] if cap is None else min(prev[len(b)], cap + 1)


def similarity(a: str, b: str) -> float:
    """Normalized Levenshtein similarity 1 − d/max(|a|, |b|); 1.0 for two empty strings."""
    m = max(len(a), len(b))
    return 1.0 if m == 0 else 1.0 - levenshtein(a, b) / m


def fuzzy_match(a: str, b: str, threshold: float = FUZZY_THRESHOLD) -> bool:
    m = max(len(a), len(b))
    if m == 0:
        return True
    cap = int((1.0 - threshold) * m + 1e-9)  # largest distance still meeting the threshold
    return 1.0 - levenshtein(a, b, cap=cap) / m >= threshold - 1e-12


def verdict(case: CaseResult, threshold: float = FUZZY_THRESHOLD) -> CaseVerdict:
    ex = case.candidate_exit == 0
    comparable = ex and case.side_effects_equal
    em = comparable and exact_match(case.oracle_stdout, case.candidate_stdout)
    fm = comparable and (em or fuzzy_match(case.oracle_stdout, case.candidate_stdout, threshold))
    sm: bool | None
    if not comparable:
        sm = False
    elif fm:
        sm = True
    else:
        sm = case.semantic_equal
    return CaseVerdict(exec=ex, comparable=comparable, em=em, fm=fm, sm=sm)


class FunnelScore(BaseModel):
    """One repository (generated tool). Scores in [0, 1]; None = n/a."""

    build: bool
    exec: float | None
    em: float | None
    fm: float | None
    sm: float | None
    per_class: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    n_cases: int = 0
    n_classes: int = 0


METRICS = ("exec", "em", "fm", "sm")


def repository_score(build_ok: bool, cases: Sequence[CaseResult],
                     threshold: float = FUZZY_THRESHOLD) -> FunnelScore:
    """Eq. 3–4: per-class pass rates, macro-averaged; all zero when the build failed."""
    valid = [c for c in cases if c.oracle_exit == 0]
    if not build_ok:
        return FunnelScore(build=False, exec=0.0, em=0.0, fm=0.0, sm=0.0, n_cases=len(valid))
    by_class: dict[str, list[CaseVerdict]] = {}
    for c in valid:
        by_class.setdefault(c.command_class, []).append(verdict(c, threshold))
    per_class: dict[str, dict[str, float | None]] = {}
    for cls, vs in sorted(by_class.items()):
        rates: dict[str, float | None] = {}
        for m in METRICS:
            vals = [getattr(v, m) for v in vs]
            rates[m] = None if any(x is None for x in vals) else sum(vals) / len(vals)
        per_class[cls] = rates
    macro: dict[str, float | None] = {}
    for m in METRICS:
        vals = [r[m] for r in per_class.values()]
        macro[m] = (None if not vals or any(v is None for v in vals)
                    else sum(v for v in vals if v is not None) / len(vals))
    return FunnelScore(build=True, exec=macro["exec"], em=macro["em"], fm=macro["fm"],
                       sm=macro["sm"], per_class=per_class, n_cases=len(valid),
                       n_classes=len(per_class))


class FunnelSummary(BaseModel):
    """Averages over repositories (the paper's table values)."""

    n: int
    build: float | None
    exec: float | None
    em: float | None
    fm: float | None
    sm: float | None


def summarize(scores: Sequence[FunnelScore]) -> FunnelSummary:
    def mean(vals: list[float | None]) -> float | None:
        if not vals or any(v is None for v in vals):
            return None
        return sum(v for v in vals if v is not None) / len(vals)

    return FunnelSummary(n=len(scores), build=mean([float(s.build) for s in scores]),
                         exec=mean([s.exec for s in scores]), em=mean([s.em for s in scores]),
                         fm=mean([s.fm for s in scores]), sm=mean([s.sm for s in scores]))

"""AgencyBench metrics (paper 004, §4.1): rubric scores, feedback rounds, Pass@k, efficiency.

A task is attempted in rounds 1..K (round 1 is the first submission; each later round follows
user-simulation feedback) until its score reaches the pass threshold or K rounds are used.
- task score = 10 × satisfied rubrics / rubrics (0–10); passed iff score ≥ 6 (60 %);
- S_avg = mean final task score, as a percentage;
- Att = attempts used / tasks (Eq. 1);
- Pass@k = tasks passed within k rounds / tasks (Eq. 2); Rise = (Pass@2 − Pass@1)/Pass@1;
- E_att = S_avg / Att, E_tok = S_avg / Tok with Tok the mean tokens per scenario (Eq. 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

PASS_FRACTION = 0.6


class RoundResult(BaseModel):
    """One round (attempt) of one task."""

    model_config = ConfigDict(extra="forbid")

    scenario: str
    task: str
    round: int = Field(ge=1)
    rubric_satisfied: int = Field(ge=0)
    rubric_total: int = Field(gt=0)
    tokens: int | None = Field(default=None, ge=0)


def task_score(satisfied: int, total: int) -> float:
    if total <= 0 or not 0 <= satisfied <= total:
        raise ValueError("need 0 <= satisfied <= total and total > 0")
    return 10.0 * satisfied / total


def passes(score: float) -> bool:
    return score >= 10.0 * PASS_FRACTION - 1e-9


class AgencySummary(BaseModel):
    n_tasks: int
    n_scenarios: int
    s_avg: float = Field(description="percent")
    att: float
    pass_at: dict[int, float]
    rise: float | None = Field(description="relative rise of Pass@2 over Pass@1, percent")
    tokens_per_scenario: float | None
    e_att: float
    e_tok: float | None


def summarize(rounds: Sequence[RoundResult], ks: Sequence[int] = (1, 2)) -> AgencySummary:
    tasks: dict[tuple[str, str], list[RoundResult]] = {}
    for r in rounds:
        tasks.setdefault((r.scenario, r.task), []).append(r)
    if not tasks:
        raise ValueError("no rounds to summarize")
    finals, attempts, first_pass = [], [], []
    tokens: dict[str, int] = {}
    tokens_known = True
    for key, rs in tasks.items():
        rs = sorted(rs, key=lambda r: r.round)
        scores = [task_score(r.rubric_satisfied, r.rubric_total) for r in rs]
        used = next((i + 1 for i, s in enumerate(scores) if passes(s)), len(scores))
        finals.append(scores[used - 1])
        attempts.append(used)
        first_pass.append(rs[used - 1].round if passes(scores[used - 1]) else None)
        for r in rs[:used]:
            if r.tokens is None:
                tokens_known = False
            else:
                tokens[key[0]] = tokens.get(key[0], 0) + r.tokens
    n = len(tasks)
    s_avg = 10.0 * sum(finals) / n
    att = sum(attempts) / n
    pass_at = {k: sum(1 for p in first_pass if p is not None and p <= k) / n for k in ks}
    rise = None
    if 1 in pass_at and 2 in pass_at and pass_at[1] > 0:
        rise = 100.0 * (pass_at[2] - pass_at[1]) / pass_at[1]
    scenarios = {s for s, _ in tasks}
    tok = sum(tokens.values()) / len(scenarios) if tokens_known else None
    return AgencySummary(n_tasks=n, n_scenarios=len(scenarios), s_avg=s_avg, att=att,
                         pass_at=pass_at, rise=rise, tokens_per_scenario=tok,
                         e_att=s_avg / att, e_tok=(s_avg / tok) if tok else None)

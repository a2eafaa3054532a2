"""AgencyBench metrics (paper 004, §4.1): rubric scores, feedback rounds, Pass@k, efficiency.

A task is attempted in rounds 1..K (round 1 is the first submission; each later round follows
user-simulation feedback) until its score reaches the pass threshold or K rounds are used.
- task score = 10 × satisfied rubrics / rubrics (0–10); passed iff score ≥ 6 (60 %);
- S_avg = mean final task score, as a percentage;
- Att = attempts used / tasks (Eq. 1);
- Pass@k = tasks passed within k rounds / tasks (Eq. 2); Rise = (Pass@2 − Pass@1)/Pass@1;
- E_att = S_avg / Att, E_tok = S_avg / Tok with Tok the mean tokens per scenario (Eq. 3);
  the paper states Tok in millions (Claude-4.5-Sonnet: 46.4 / 4.1 M = 11.3, Fig. 4 says 11.4),
  which is ``e_tok_m``; ``e_tok`` is the same per raw token.
Pass@k is n/a when a task failed after fewer than k rounds (unknown whether it would pass).
:mod:`agentmeter.metrics.from_store` builds :class:`TaskOutcome` rows from stored trials.
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


class TaskOutcome(BaseModel):
    """One task's feedback-round history, reduced to what the metrics need: the final score,
    the rounds used (stopping at the first pass) and the round it passed in."""

    model_config = ConfigDict(extra="forbid")

    scenario: str
    task: str
    final_score: float = Field(ge=0, le=10, description="score of the last round used, 0-10")
    rounds_used: int = Field(ge=1)
    passed_round: int | None = Field(default=None, ge=1,
                                     description="round it first passed in; None = never")
    tokens: int | None = Field(default=None, ge=0, description="raw tokens of the rounds used")


class AgencySummary(BaseModel):
    n_tasks: int
    n_scenarios: int
    s_avg: float = Field(description="percent")
    att: float
    pass_at: dict[int, float | None] = Field(
        description="None when some failed task had fewer than k rounds (unknown)")
    rise: float | None = Field(description="relative rise of Pass@2 over Pass@1, percent")
    tokens_per_scenario: float | None
    e_att: float
    e_tok: float | None = Field(description="S_avg per raw token per scenario")
    e_tok_m: float | None = Field(default=None, description="S_avg / Tok with Tok in millions "
                                  "of tokens per scenario: the paper's unit (Fig. 4)")


def outcome(scenario: str, task: str, scores: Sequence[float],
            tokens: Sequence[int | None] | None = None) -> TaskOutcome:
    """A task's outcome from its per-round scores (0-10) in round order: rounds stop at the
    first pass; tokens (per round) are summed over the rounds used, None if any is unknown."""
    if not scores:
        raise ValueError(f"task {task!r}: no rounds")
    used = next((i + 1 for i, s in enumerate(scores) if passes(s)), len(scores))
    tok: int | None = None
    if tokens is not None:
        counted = list(tokens[:used])
        if len(counted) == used and all(t is not None for t in counted):
            tok = sum(t for t in counted if t is not None)
    return TaskOutcome(scenario=scenario, task=task, final_score=scores[used - 1],
                       rounds_used=used, passed_round=used if passes(scores[used - 1]) else None,
                       tokens=tok)


def summarize(rounds: Sequence[RoundResult], ks: Sequence[int] = (1, 2)) -> AgencySummary:
    tasks: dict[tuple[str, str], list[RoundResult]] = {}
    for r in rounds:
        tasks.setdefault((r.scenario, r.task), []).append(r)
    if not tasks:
        raise ValueError("no rounds to summarize")
    outcomes = []
    for (scenario, task), rs in tasks.items():
        rs = sorted(rs, key=lambda r: r.round)
        outcomes.append(outcome(scenario, task,
                                [task_score(r.rubric_satisfied, r.rubric_total) for r in rs],
                                [r.tokens for r in rs]))
    return summarize_outcomes(outcomes, ks)


def summarize_outcomes(outcomes: Sequence[TaskOutcome],
                       ks: Sequence[int] = (1, 2)) -> AgencySummary:
    """Eq. 1-3 over task outcomes. Pass@k is n/a when a task failed after fewer than k rounds
    (whether it would have passed within k is unknown); Rise is n/a when Pass@1 is 0 or n/a;
    Tok and E_tok are n/a when any task's tokens are unknown."""
    if not outcomes:
        raise ValueError("no task outcomes to summarize")
    n = len(outcomes)
    s_avg = 10.0 * sum(o.final_score for o in outcomes) / n
    att = sum(o.rounds_used for o in outcomes) / n
    pass_at: dict[int, float | None] = {}
    for k in ks:
        unknown = any(o.passed_round is None and o.rounds_used < k for o in outcomes)
        pass_at[k] = None if unknown else sum(
            1 for o in outcomes if o.passed_round is not None and o.passed_round <= k) / n
    p1, p2 = pass_at.get(1), pass_at.get(2)
    rise = 100.0 * (p2 - p1) / p1 if p1 is not None and p2 is not None and p1 > 0 else None
    scenarios = {o.scenario for o in outcomes}
    tok: float | None = None
    if all(o.tokens is not None for o in outcomes):
        tok = sum(o.tokens or 0 for o in outcomes) / len(scenarios)
    return AgencySummary(n_tasks=n, n_scenarios=len(scenarios), s_avg=s_avg, att=att,
                         pass_at=pass_at, rise=rise, tokens_per_scenario=tok,
                         e_att=s_avg / att, e_tok=(s_avg / tok) if tok else None,
                         e_tok_m=(s_avg / (tok / 1e6)) if tok else None)

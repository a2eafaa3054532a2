"""The result of a scoring: what the CLI and the report render. ``None`` means n/a."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentmeter.metrics.choices import LEADERBOARD_SORTS as LEADERBOARD_SORTS
from agentmeter.metrics.frame import Tier


class Interval(BaseModel):
    """A percentile bootstrap confidence interval."""

    low: float
    high: float


class TierFigures(BaseModel):
    tier: Tier
    n_tasks: int = Field(description="|T_g| in the scoring")
    n_counted: int = Field(description="tasks in the denominator: |T_g| (infra_invalid ones "
                           "left out only with infra_invalid = exclude)")
    passes: int
    sr: float | None
    cbq: list[float | None] = Field(description="CBQ_g(c, b) for b in the tier's grid")
    cost_aubqc: float | None
    efr: float | None
    score: float | None


class RepeatedReads(BaseModel):
    """Repeated file reads (a file read again by the same trajectory; the runner's
    ``extra["trajectory"]["repeated_reads"]``) over a configuration's selected trials, one per
    task. Descriptive (§1: "fails after 4.78M tokens and 30 repeated file reads"), not an AMS
    component."""

    trajectories: int = Field(description="selected trials that recorded the count")
    not_recorded: int = Field(description="selected trials without it (imported, older stores)")
    total: int
    mean: float | None = Field(description="per recorded trajectory; None when none recorded")
    max: int | None
    with_repeats: int = Field(description="trajectories with at least one repeated read")


class ConfigRow(BaseModel):
    config_id: str
    label: str
    model: str
    agent: str
    n_tasks: int
    n_scored: int
    n_infra_invalid: int
    n_missing: int
    passes: int
    pass_rate: float | None = Field(description="Pass/N over the scoring's tasks")
    tiers: dict[Tier, TierFigures]
    tokens: float | None = Field(description="raw tokens spent by every completed try of every "
                                 "attempt (selected or not, infra_invalid included)")
    usd: float | None = Field(description="billable USD spent by every completed try of every "
                              "attempt (selected or not, infra_invalid included)")
    tok_per_pass: float | None = Field(description="tokens / passes")
    usd_per_pass: float | None = Field(description="usd / passes")
    ams: float | None
    delta_best: float | None = Field(description="same-model AMS gap to the best agent")
    repeated_reads: RepeatedReads | None = Field(default=None,
                                                 description="None: no selected trial")
    ci: dict[str, Interval] = Field(default_factory=dict)


class ModelSummary(BaseModel):
    """Best and worst agent of one model by AMS (AgentMeter Table 3)."""

    model: str
    best_agent: str
    best_config: str
    best_ams: float
    worst_agent: str
    worst_config: str
    worst_ams: float
    spread: float


class Winners(BaseModel):
    """Config ids winning each criterion (several on a tie; empty when n/a for all)."""

    passes: list[str] = Field(default_factory=list)
    tok_per_pass: list[str] = Field(default_factory=list)
    usd_per_pass: list[str] = Field(default_factory=list)
    ams: list[str] = Field(default_factory=list)


class TierSetup(BaseModel):
    tier: Tier
    n_tasks: int
    budgets: list[float] | None
    tau: float | None


class BootstrapInfo(BaseModel):
    resamples: int
    level: float
    seed: int
    over_attempts: bool
    strata: str = "tier"


class Scorecard(BaseModel):
    rows: list[ConfigRow]
    models: list[ModelSummary]
    winners: Winners
    tiers: list[TierSetup]
    alpha: float
    infra_policy: str
    tier_source: str = Field(description="'calibration' or 'stored'")
    budget_source: str
    n_tasks: int
    bootstrap: BootstrapInfo | None = None
    notes: list[str] = Field(default_factory=list)

    def ranked(self, by: str = "ams") -> list[int]:
        """Positions of :attr:`rows` in leaderboard order, the one order every leaderboard
        (terminal, HTML, viewer) shows: by AMS or pass rate high first, by USD or tokens per
        pass low first; n/a last; AMS ties go to the higher pass rate, remaining ties by label.
        """
        if by not in LEADERBOARD_SORTS:
            raise ValueError(f"unknown leaderboard order {by!r} ({', '.join(LEADERBOARD_SORTS)})")

        def key(k: int) -> tuple[bool, float, float, str]:
            r = self.rows[k]
            value = {"ams": r.ams, "pass": r.pass_rate, "usd": r.usd_per_pass,
                     "tok": r.tok_per_pass}[by]
            high_first = by in ("ams", "pass")
            tie = -(r.pass_rate or 0.0) if by == "ams" else 0.0
            return value is None, -(value or 0.0) if high_first else (value or 0.0), tie, r.label

        return sorted(range(len(self.rows)), key=key)

    def row(self, config_id: str) -> ConfigRow:
        for r in self.rows:
            if r.config_id == config_id:
                return r
        raise KeyError(config_id)

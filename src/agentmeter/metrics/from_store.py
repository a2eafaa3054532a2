"""The CLI-Tool-Bench funnel and the AgencyBench metrics from a run's stored trials.

Both need what the columnar :class:`~agentmeter.metrics.frame.TrialFrame` leaves out (named
rewards, ``extra``, tool calls by name), so they read :class:`TrialRecord` rows: the selected
tries of :func:`agentmeter.store.queries.selected_trials` (the selection rule's home: per
(config, task, attempt) the latest completed try, and with several runs the most recently
created run's). infra_invalid tries are not the configuration's fault and are left out of
quality (``TrialStatus.scored``; their spending is the AMS's business). Conventions are in
docs/metrics.md.

Funnel: a trial's ``rewards`` (the verifier's reward.json) carry ``build`` (0/1) and per
command class ``<class>.exec``, ``<class>.side_effects``, ``<class>.em``, ``<class>.fm``,
``<class>.sm`` (pass fractions over the class's valid cases), optionally the SM variants
``<class>.sm_fm`` and ``<class>.sm_nogate`` and ``<class>.cases``.
A task is a funnel task when some scored trial of it carries these keys; a scored trial of a
funnel task without them delivered no tool the verifier could test, and counts as a failed
build. One selected trial per (config, task) is one repository.

AgencyBench: reward = rubric fraction, task score = 10 × reward, passed at ≥ 60 %. A scenario
step records its feedback rounds inside its trial (``extra["rounds"]``, ``extra["round_scores"]``,
``extra["skipped"]``, ``extra["scenario"]``, ``extra["category"]``:
:mod:`agentmeter.metrics.agency_trials`); older stores fall back to ``rewards["rounds"]`` or the
scored attempts in order (stopping at the first pass). The scenario is ``extra["scenario"]``,
else the task itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from agentmeter.metrics import agency, funnel
from agentmeter.metrics import funnel_analyses as fa
from agentmeter.metrics.agency_trials import cell_outcome, recorded_rounds
from agentmeter.metrics.scorecard import Interval
from agentmeter.metrics.uncertainty import intervals
from agentmeter.pricing import PriceBook
from agentmeter.records import ConfigRecord, TaskRecord, TrialRecord
from agentmeter.store.queries import StoredTrials

NO_CATEGORY = "(none)"


def _mean(vals: Sequence[float | None]) -> float | None:
    """Mean, n/a when empty or any value is unknown (nothing unknown counts as zero)."""
    if not vals or any(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None) / len(vals)


def _by_cell(trials: Sequence[TrialRecord]) -> dict[tuple[str, str], list[TrialRecord]]:
    cells: dict[tuple[str, str], list[TrialRecord]] = {}
    for t in trials:
        if t.status.scored:
            cells.setdefault((t.config_id, t.task_id), []).append(t)
    for ts in cells.values():
        ts.sort(key=lambda t: t.attempt)
    return cells


# --- CLI-Tool-Bench funnel ---------------------------------------------------------------------

def funnel_rates(rewards: dict[str, float]) -> tuple[bool, dict[str, dict[str, float | None]],
                                                       int] | None:
    """(build ok, per-class rates, valid cases) from named rewards; None when the trial has no
    differential-testing keys. Raises ValueError for values that are not pass fractions."""
    classes: dict[str, dict[str, float | None]] = {}
    cases = 0
    for key, value in rewards.items():
        cls, dot, level = key.rpartition(".")
        if not dot or not cls or level not in (*funnel.LEVELS, *funnel.VARIANTS, "cases"):
            continue
        if level == "cases":
            if not math.isfinite(value) or value < 0 or value != int(value):
                raise ValueError(f"{key} = {value} is not a case count")
            cases += int(value)
            classes.setdefault(cls, {})
            continue
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{key} = {value} is not a pass fraction in [0, 1]")
        classes.setdefault(cls, {})[level] = value
    if "build" not in rewards and not classes:
        return None
    build = rewards.get("build", 1.0 if classes else 0.0)
    if build not in (0.0, 1.0):
        raise ValueError(f"build = {build} is not 0 or 1")
    levels = (*funnel.LEVELS, *funnel.VARIANTS)
    return build == 1.0, {c: {m: r.get(m) for m in levels} for c, r in classes.items()}, cases


class FunnelRow(BaseModel):
    config_id: str
    label: str
    model: str
    summary: funnel.FunnelSummary | None = Field(description="None: no funnel task scored")
    breakdowns: dict[str, dict[str, funnel.FunnelSummary]] = Field(
        default_factory=dict, description="dimension (language, difficulty, domain) -> group -> "
        "the summary over that group's tasks; see funnel_groups")
    ci: dict[str, Interval] = Field(default_factory=dict, description="bootstrap intervals over "
                                    "repositories of each funnel level, when resamples > 0")
    n_without_results: int = Field(0, description="scored trials on funnel tasks that left no "
                                   "differential-testing rewards: counted as failed builds")
    usd_per_repo: float | None = None
    steps_per_repo: float | None = None
    prompt_ktok_per_repo: float | None = None
    completion_ktok_per_repo: float | None = None


class FunnelReport(BaseModel):
    tasks: list[str] = Field(description="the funnel tasks (some trial has the reward keys)")
    n_other_tasks: int = Field(description="tasks without differential-testing results")
    rows: list[FunnelRow] = Field(description="ranked by SM (FM where SM is n/a), highest "
                                  "first")
    notes: list[str] = Field(default_factory=list)
    # the paper's analyses (metrics/funnel_analyses.py), keyed by config id
    complexity: dict[str, fa.Complexity] = Field(
        default_factory=dict, description="RQ2: per config id, and 'all' pooled")
    cost: dict[str, fa.Cost] = Field(default_factory=dict, description="RQ3, Table 3")
    structure: dict[str, fa.Structure] = Field(
        default_factory=dict, description="RQ4, Fig. 5: per config id, and 'oracle'")
    robustness: dict[str, fa.Robustness] = Field(default_factory=dict, description="§5.1")
    runtime: fa.RuntimeTable | None = Field(None, description="§5.1, Table 4")
    models: dict[str, fa.Average] = Field(default_factory=dict, description="Table 2: per model, "
                                          "the average over its configurations")
    agents: dict[str, fa.Average] = Field(default_factory=dict, description="Table 2's bottom "
                                          "row: per agent, the average over its models")


def _cell_trial(ts: list[TrialRecord]) -> TrialRecord:
    """Selection rule: the latest scored attempt."""
    return ts[-1]


#: the breakdown dimensions of the CLI-Tool-Bench tables
FUNNEL_DIMENSIONS = ("language", "difficulty", "domain")


def funnel_groups(task: TaskRecord | None) -> dict[str, str]:
    """A task's group in each breakdown dimension: language from a ``language:X`` tag,
    difficulty from its tier, domain from its category; a dimension the task does not state is
    left out (never guessed)."""
    if task is None:
        return {}
    groups: dict[str, str] = {}
    for tag in task.tags:
        key, sep, value = tag.partition(":")
        if sep and key.strip().lower() in ("language", "lang") and value.strip():
            groups["language"] = value.strip().lower()
            break
    if task.tier:
        groups["difficulty"] = task.tier
    if task.category:
        groups["domain"] = task.category
    return groups


def _breakdowns(scored: list[tuple[str, funnel.FunnelScore]],
                tasks: dict[str, TaskRecord]) -> dict[str, dict[str, funnel.FunnelSummary]]:
    grouped: dict[str, dict[str, list[funnel.FunnelScore]]] = {}
    for task_id, sc in scored:
        for dim, group in funnel_groups(tasks.get(task_id)).items():
            grouped.setdefault(dim, {}).setdefault(group, []).append(sc)
    return {dim: {g: funnel.summarize(grouped[dim][g]) for g in sorted(grouped[dim])}
            for dim in FUNNEL_DIMENSIONS if dim in grouped}


def funnel_report(data: StoredTrials, book: PriceBook | None = None,
                  resamples: int = 0) -> FunnelReport:
    notes: list[str] = []
    cells = _by_cell(data.selected)
    parsed: dict[tuple[str, str], tuple[bool, dict[str, dict[str, float | None]], int] | None] = {}
    invalid: set[tuple[str, str]] = set()
    for key, ts in cells.items():
        t = _cell_trial(ts)
        try:
            parsed[key] = funnel_rates(t.rewards)
        except ValueError as e:
            notes.append(f"trial {t.id!r} (run {t.run_id}): reward.json {e}; left out")
            parsed[key] = None
            invalid.add(key)
    funnel_tasks = sorted({task for (_, task), p in parsed.items() if p is not None})
    all_tasks = {t.task_id for t in data.selected} | set(data.tasks)
    rows: list[FunnelRow] = []
    by_config: dict[str, list[fa.Repo]] = {}
    for cfg in data.configs:
        scores: list[funnel.FunnelScore] = []
        repos: list[fa.Repo] = []
        scored_tasks: list[str] = []
        spend: list[TrialRecord] = []
        n_without = 0
        for task in funnel_tasks:
            cell = cells.get((cfg.id, task))
            if not cell or (cfg.id, task) in invalid:
                continue
            t = _cell_trial(cell)
            p = parsed[(cfg.id, task)]
            if p is None:
                n_without += 1
                scores.append(funnel.score_from_rates(False, {}))
            else:
                scores.append(funnel.score_from_rates(p[0], p[1], n_cases=p[2]))
            scored_tasks.append(task)
            spend.append(t)
            repos.append(_repo(task, t, scores[-1], _cost(t, cfg, book)))
        missing = len(funnel_tasks) - len(scores)
        if missing and scores:
            notes.append(f"{cfg.label}: {missing} funnel task(s) without a scored trial "
                         "(missing, infra_invalid or unreadable results) are left out")
        rows.append(FunnelRow(
            config_id=cfg.id, label=cfg.label, model=cfg.model.name,
            summary=funnel.summarize(scores) if scores else None,
            breakdowns=_breakdowns(list(zip(scored_tasks, scores, strict=True)), data.tasks),
            ci=intervals({level: [math.nan if getattr(sc, level) is None else float(getattr(sc, level))
                                  for sc in scores]
                         for level in ("build", *funnel.LEVELS, *funnel.VARIANTS)},
                         resamples),
            n_without_results=n_without,
            usd_per_repo=_mean([_cost(t, cfg, book) for t in spend]),
            steps_per_repo=_mean([None if t.turns is None else float(t.turns) for t in spend]),
            prompt_ktok_per_repo=_mean([None if t.usage.input is None else t.usage.input / 1e3
                                        for t in spend]),
            completion_ktok_per_repo=_mean([None if t.usage.output is None
                                            else t.usage.output / 1e3 for t in spend])))
        by_config[cfg.id] = repos
        if n_without:
            notes.append(f"{cfg.label}: {n_without} trial(s) on funnel tasks left no "
                         "differential-testing results: counted as failed builds")
    if not funnel_tasks:
        notes.insert(0, "no differential-testing results in this run (no trial's reward.json "
                     "has the funnel keys: see docs/metrics.md)")
    elif len(all_tasks) > len(funnel_tasks):
        notes.append(f"{len(all_tasks) - len(funnel_tasks)} task(s) without differential-testing "
                     "results are not part of the funnel")
    rows.sort(key=_rank)
    report = FunnelReport(tasks=funnel_tasks, n_other_tasks=len(all_tasks) - len(funnel_tasks),
                          rows=rows, notes=notes, runtime=None)
    if funnel_tasks:
        _analyses(report, by_config, data.configs)
    return report


def _rank(r: FunnelRow) -> tuple[float, float, str]:
    """SM, highest first; where SM is n/a (no judge ran), FM stands in for it (what the
    trial's reward is then); then FM; n/a last."""
    s = r.summary
    fm = s.fm if s is not None and s.fm is not None else -1.0
    sm = s.sm if s is not None and s.sm is not None else fm
    return (-sm, -fm, r.label)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _num(v: object) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None  # type: ignore[arg-type]


def _repo(task: str, t: TrialRecord, sc: funnel.FunnelScore, usd: float | None) -> fa.Repo:
    """What the analyses read from one selected trial: the verifier's keys (native runs) or the
    imported row's fields (``import --format clitoolbench``)."""
    x, r = t.extra, t.rewards
    shape = x.get("structure") if isinstance(x.get("structure"), dict) else {}
    assert isinstance(shape, dict)
    oracle_ms, cand_ms = _num(r.get("oracle_ms_per_cmd")), _num(r.get("candidate_ms_per_cmd"))
    if oracle_ms is None and cand_ms is None:  # imported: mean seconds per command
        o, c = _num(x.get("oracle_time")), _num(x.get("time"))
        oracle_ms, cand_ms = (None if o is None else o * 1e3), (None if c is None else c * 1e3)
    return fa.Repo(
        task=task, build=sc.build, exec=sc.exec, sm=sc.sm, fm=sc.fm,
        oracle_loc=_int(x.get("oracle_loc")),
        steps=None if t.turns is None else float(t.turns),
        prompt_ktok=None if t.usage.input is None else t.usage.input / 1e3,
        completion_ktok=None if t.usage.output is None else t.usage.output / 1e3, usd=usd,
        files=_int(shape.get("files", x.get("files"))), loc=_int(shape.get("loc", x.get("loc"))),
        oracle_files=_int(x.get("oracle_files")),
        negative_cases=_num(r.get("negative_cases")),
        negative_exit_agree=_num(r.get("negative_exit_agree")),
        negative_output_match=_num(r.get("negative_output_match")),
        oracle_ms=oracle_ms, candidate_ms=cand_ms)


def _analyses(report: FunnelReport, by_config: dict[str, list[fa.Repo]],
              configs: Sequence[ConfigRecord]) -> None:
    report.complexity = {cid: fa.complexity(rs) for cid, rs in by_config.items()}
    report.complexity["all"] = fa.complexity([r for rs in by_config.values() for r in rs])
    report.cost = {cid: fa.cost(rs) for cid, rs in by_config.items()}
    report.structure = {cid: fa.structure(rs) for cid, rs in by_config.items()}
    report.structure["oracle"] = fa.oracle_structure([r for rs in by_config.values() for r in rs])
    measured = any(r.negative_cases is not None for rs in by_config.values() for r in rs)
    report.robustness = {cid: fa.robustness(rs, measured) for cid, rs in by_config.items()}
    report.runtime = fa.runtime({cid: rs for cid, rs in by_config.items() if rs})
    means = {r.config_id: {lv: getattr(r.summary, lv) for lv in fa.LEVELS}
             for r in report.rows if r.summary is not None}
    models: dict[str, list[tuple[str, dict[str, float | None]]]] = {}
    agents: dict[str, list[tuple[str, dict[str, float | None]]]] = {}
    for cfg in configs:
        if cfg.id in means:
            models.setdefault(cfg.model.name, []).append((cfg.id, means[cfg.id]))
            agents.setdefault(cfg.agent.name, []).append((cfg.id, means[cfg.id]))
    report.models, report.agents = fa.averages(models), fa.averages(agents)


def _cost(t: TrialRecord, cfg: ConfigRecord, book: PriceBook | None) -> float | None:
    """The stored cost, or Eq. 2 from usage under ``book`` when repricing."""
    if book is None:
        return t.cost_usd
    if t.model_calls == 0 and t.usage.input is None and t.usage.output is None:
        return t.cost_usd  # nothing metered (oracle, nop)
    key = cfg.model.price_key or cfg.model.name
    return book.cost_usd(key, t.usage)


# --- AgencyBench -------------------------------------------------------------------------------

class AgencyRow(BaseModel):
    config_id: str
    label: str
    model: str
    summary: agency.AgencySummary | None = Field(description="None: no scored task")
    by_category: dict[str, float] = Field(
        default_factory=dict, description="S_avg (percent) per capability: the trial's "
        "extra.category, else the task's category")
    tools: dict[str, int] = Field(default_factory=dict,
                                  description="tool invocations over the rounds counted")
    turns_per_task: float | None = Field(None, description="agent turns of the rounds used, "
                                         "per task that ran (skipped tasks left out)")
    n_infra_only: int = Field(0, description="tasks whose attempts were all infra_invalid")
    ci: dict[str, Interval] = Field(default_factory=dict, description="bootstrap intervals over "
                                    "tasks: s_avg (percent) and pass@k, when resamples > 0")


class AgencyReport(BaseModel):
    rows: list[AgencyRow]
    ks: list[int]
    rounds_source: str = Field(description="'attempts', 'recorded' or 'mixed'")
    scenario_pass_rule: agency.ScenarioPassRule = Field(
        "mean", description="how a scenario passes (an inference; docs/metrics.md)")
    notes: list[str] = Field(default_factory=list)


def has_agency_data(data: StoredTrials) -> bool:
    """AgencyBench signals: recorded feedback rounds, scenario steps, or scored tasks with a
    category."""
    scored = [t for t in data.selected if t.status.scored]
    return any(recorded_rounds(t) is not None or "scenario" in t.extra for t in scored) or any(
        (rec := data.tasks.get(t.task_id)) is not None and rec.category for t in scored)


def _agency_intervals(outcomes: list[agency.TaskOutcome], summary: agency.AgencySummary | None,
                      ks: Sequence[int], resamples: int) -> dict[str, Interval]:
    if summary is None:
        return {}
    values: dict[str, list[float]] = {"s_avg": [10.0 * o.final_score for o in outcomes]}
    for k in ks:
        if summary.pass_at.get(k) is not None:  # n/a Pass@k gets no interval either
            values[f"pass@{k}"] = [float(bool(o.passed_within(k))) for o in outcomes]
    return intervals(values, resamples)


def agency_report(data: StoredTrials, ks: Sequence[int] = (1, 2), resamples: int = 0,
                  scenario_rule: agency.ScenarioPassRule = "mean") -> AgencyReport:
    notes: list[str] = []
    cells = _by_cell(data.selected)
    infra_cells = {(t.config_id, t.task_id) for t in data.selected} - set(cells)
    sources: set[str] = set()
    rows: list[AgencyRow] = []
    for cfg in data.configs:
        outcomes: list[agency.TaskOutcome] = []
        by_cat: dict[str, list[float]] = {}
        tools: dict[str, int] = {}
        turns: list[float | None] = []
        for (cid, task), ts in sorted(cells.items()):
            if cid != cfg.id:
                continue
            cell = cell_outcome(task, ts, data.tasks.get(task))
            if isinstance(cell, str):
                notes.append(f"{cfg.label} / {cell}")
                continue
            notes += cell.notes
            if cell.source != "skipped":
                sources.add(cell.source)
            o = cell.outcome
            outcomes.append(o)
            by_cat.setdefault(o.category or NO_CATEGORY, []).append(o.final_score)
            for t in cell.used:
                for name, count in t.tool_calls.items():
                    tools[name] = tools.get(name, 0) + count
                turns.append(None if t.turns is None else float(t.turns))
        n_infra = sum(1 for c, _ in infra_cells if c == cfg.id)
        summary = agency.summarize_outcomes(outcomes, ks, scenario_rule) if outcomes else None
        n_ran = sum(1 for o in outcomes if not o.skipped)
        rows.append(AgencyRow(
            config_id=cfg.id, label=cfg.label, model=cfg.model.name, summary=summary,
            by_category={c: 10.0 * sum(v) / len(v) for c, v in sorted(by_cat.items())},
            tools=dict(sorted(tools.items(), key=lambda kv: (-kv[1], kv[0]))),
            turns_per_task=(None if not n_ran or any(x is None for x in turns)
                            else sum(x or 0.0 for x in turns) / n_ran),
            n_infra_only=n_infra, ci=_agency_intervals(outcomes, summary, ks, resamples)))
        if n_infra:
            notes.append(f"{cfg.label}: {n_infra} task(s) with only infra_invalid attempts are "
                         "left out")
        if summary is not None and summary.n_skipped:
            notes.append(f"{cfg.label}: {summary.n_skipped} step(s) skipped after their "
                         "scenario halted: scored 0, failed, left out of Att")
    if not cells:
        notes.insert(0, "no scored trials in this run: AgencyBench metrics are n/a")
    source = "mixed" if len(sources) > 1 else (sources.pop() if sources else "attempts")
    if source != "recorded":
        notes.append("rounds = attempts in order, stopping at the first with reward >= 0.6; "
                     "tokens, tools and turns are counted over those rounds")
    notes.append(f"Pass@k over scenarios: a scenario passes when {_RULES[scenario_rule]} "
                 "(an inference: the paper does not state the rule)")
    return AgencyReport(rows=rows, ks=list(ks), rounds_source=source,
                        scenario_pass_rule=scenario_rule, notes=notes)


_RULES = {"mean": "its mean task score after k rounds is >= 6",
          "all": "every task of it passed within k rounds"}

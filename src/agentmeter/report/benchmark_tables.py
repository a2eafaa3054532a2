"""Rich rendering of the benchmark-specific metrics: CLI-Tool-Bench's funnel and its analyses
(``funnel_table``), AgencyBench's figures (``agency_table``). ``n/a`` marks a value that could
not be computed; nothing unknown is shown as zero."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agentmeter.metrics import funnel_analyses as fa
from agentmeter.metrics.from_store import FUNNEL_DIMENSIONS, AgencyReport, FunnelReport
from agentmeter.metrics.scorecard import Interval
from agentmeter.report.cells import NA, _f, _label, _pct, _usd


def funnel_table(report: FunnelReport, title: str) -> RenderableType:
    """CLI-Tool-Bench funnel per configuration (means over repositories, with the bootstrap
    interval when resampled), the publisher's statistics of SM (SD with n − 1 and the 90 %
    normal half-width 1.645·SD/√n), the SM variants when some trial has them, and generation
    overhead per repository (Table 3's steps, prompt/completion tokens in K, cost)."""
    table = Table(title=f"{title} ({len(report.tasks)} funnel tasks)", title_justify="left")
    table.add_column("configuration")
    table.add_column("repos", justify="right")
    variants = [v for v in ("sm_fm", "sm_nogate")
                if any(r.summary is not None and getattr(r.summary, v) is not None
                       for r in report.rows)]
    heads = {"sm_fm": "SM (FM∨judge)", "sm_nogate": "SM (no ΔS gate)"}
    for col in ("Build", "Exec", "Side effects", "EM", "FM ≥ 0.8", "SM", "SM SD", "SM ±90%",
                *(heads[v] for v in variants), "Steps", "Prompt K", "Comp. K", "USD"):
        table.add_column(col, justify="right")
    for r in report.rows:
        s = r.summary
        table.add_row(_label(r.label, r.model), "0" if s is None else str(s.n),
                      *(_pct(getattr(s, m) if s else None) + _ci_pct(r.ci.get(m))
                        for m in ("build", "exec", "side_effects", "em", "fm", "sm")),
                      _f(s.sm_sd if s else None, ".3f"),
                      NA if s is None or s.sm_ci90 is None else f"±{s.sm_ci90:.1%}",
                      *(_pct(getattr(s, v) if s else None) + _ci_pct(r.ci.get(v))
                        for v in variants),
                      _f(r.steps_per_repo, ".1f"), _f(r.prompt_ktok_per_repo, ".1f"),
                      _f(r.completion_ktok_per_repo, ".1f"), _usd(r.usd_per_repo))
    return Group(table, *_funnel_breakdowns(report), *funnel_analysis_tables(report),
                 Text("SM SD, SM ±90%: the CLI-Tool-Bench leaderboard's statistics of "
                      "per-repository SM (SD with n − 1, half-width 1.645·SD/√n); [low, high]: "
                      "bootstrap interval (--resamples)", style="dim"),
                 *(Text(f"note: {n}", style="yellow") for n in report.notes))


def _ci_pct(ci: Interval | None) -> str:
    return "" if ci is None else f" [{ci.low:.0%}, {ci.high:.0%}]"


def _funnel_breakdowns(report: FunnelReport) -> list[Table]:
    """One table per dimension the tasks state (language, difficulty, domain): SM (the paper's
    breakdown metric) with FM beside it per group, and the number of repositories."""
    tables = []
    for dim in FUNNEL_DIMENSIONS:
        groups = sorted({g for r in report.rows for g in r.breakdowns.get(dim, {})})
        if not groups:
            continue
        t = Table(title=f"funnel by {dim}: SM / FM ≥ 0.8 (repos)", title_justify="left")
        t.add_column("configuration")
        for g in groups:
            t.add_column(g, justify="right")
        for r in report.rows:
            cells = []
            for g in groups:
                s = r.breakdowns.get(dim, {}).get(g)
                cells.append(NA if s is None else f"{_pct(s.sm)} / {_pct(s.fm)} ({s.n})")
            t.add_row(_label(r.label, r.model), *cells)
        tables.append(t)
    return tables


def _mmm(st: fa.Stat, fmt: str, usd: bool = False) -> list[str]:
    f = _usd if usd else (lambda v: _f(v, fmt))
    return [f(st.mean), f(st.min), f(st.max)]


def funnel_analysis_tables(report: FunnelReport) -> list[RenderableType]:
    """The paper's analyses (metrics/funnel_analyses.py): RQ2 complexity, RQ3 cost (Table 3),
    RQ4 structure (Fig. 5), §5.1 robustness and runtime (Table 4), Table 2's averages."""
    rows = [(r.config_id, _label(r.label, r.model)) for r in report.rows]
    out: list[RenderableType] = []
    if report.complexity:
        t = Table(title="RQ2 complexity: SM by oracle LOC (easy ≤ 1500 < medium < 4000 ≤ hard; "
                  "repos); trend: LOESS of SM on log10 LOC, slope per ×10 LOC",
                  title_justify="left")
        for col in ("configuration", "easy", "medium", "hard", "LOESS (LOC: SM)", "slope/decade"):
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for cid, label in [*rows, ("all", "all configurations")]:
            c = report.complexity.get(cid)
            if c is None:
                continue
            t.add_row(label, *(f"{_pct(b.sm)} ({b.n})" for b in
                               (c.buckets[k] for k in ("easy", "medium", "hard"))),
                      ", ".join(f"{loc:.0f}: {v:.0%}" for loc, v in c.loess) or NA,
                      NA if c.slope_per_decade is None else f"{c.slope_per_decade:+.3f}")
        out.append(t)
    if report.cost:
        t = Table(title="RQ3 cost per repository (Table 3): avg / min / max", title_justify="left")
        t.add_column("configuration")
        for grp in ("Steps", "Prompt K", "Comp. K", "USD"):
            for m in ("avg", "min", "max"):
                t.add_column(f"{grp} {m}", justify="right")
        for cid, label in rows:
            co = report.cost.get(cid)
            if co is not None:
                t.add_row(label, *_mmm(co.steps, ".1f"), *_mmm(co.prompt_ktok, ".1f"),
                          *_mmm(co.completion_ktok, ".1f"), *_mmm(co.usd, "", usd=True))
        out.append(t)
    if report.structure:
        t = Table(title="RQ4 structure: files and lines the agent wrote per repository "
                  "(median \\[q1–q3], min–max)", title_justify="left")
        for col in ("configuration", "repos", "files", "lines"):
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for cid, label in [*rows, ("oracle", "oracle (human)")]:
            st = report.structure.get(cid)
            if st is None:
                continue
            t.add_row(label, str(st.files.n), _dist(st.files), _dist(st.loc))
        out.append(t)
    if any(r.n for r in report.robustness.values()):
        t = Table(title="§5.1 robustness: positive cases (Exec) vs negative cases (the oracle "
                  "fails): the candidate fails too / and prints the same (FM of stdout+stderr)",
                  title_justify="left")
        for col in ("configuration", "repos", "negative cases", "positive Exec",
                    "negative: exit agrees", "negative: output matches"):
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for cid, label in rows:
            rb = report.robustness.get(cid)
            if rb is not None and rb.n:
                t.add_row(label, str(rb.n), str(rb.negative_cases), _pct(rb.positive_exec),
                          _pct(rb.negative_exit_agree), _pct(rb.negative_output_match))
        out.append(t)
    rt = report.runtime
    if rt is not None and any(x.n for x in rt.own.values()):
        t = Table(title=f"§5.1 runtime (Table 4): ms per command; common = the "
                  f"{len(rt.common_tasks)} repositories every configuration built and executed "
                  f"(oracle {_f(rt.oracle_common_ms, '.2f')} ms)", title_justify="left")
        for col in ("configuration", "common: candidate ms", "common: ×oracle", "own repos",
                    "own: oracle ms", "own: candidate ms", "own: ×oracle"):
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for cid, label in rows:
            cm, o = rt.common.get(cid), rt.own.get(cid)
            if o is None:
                continue
            t.add_row(label, _f(cm.candidate_ms if cm else None, ".2f"),
                      _times(cm.ratio if cm else None), str(o.n), _f(o.oracle_ms, ".2f"),
                      _f(o.candidate_ms, ".2f"), _times(o.ratio))
        out.append(t)
    for title, groups in (("Table 2: per model, averaged over its configurations",
                           report.models),
                          ("Table 2: per agent, averaged over its models", report.agents)):
        if not groups:
            continue
        t = Table(title=title, title_justify="left")
        for col in ("group", "configs", "Build", "Exec", "EM", "FM", "SM"):
            t.add_column(col, justify="left" if col == "group" else "right")
        for name, avg in sorted(groups.items(), key=lambda kv: -(kv[1].sm or -1.0)):
            t.add_row(name, str(len(avg.configs)),
                      *(_pct(getattr(avg, lv)) for lv in ("build", "exec", "em", "fm", "sm")))
        out.append(t)
    return out


def _dist(d: fa.Distribution) -> str:
    if d.n == 0:
        return NA
    return (f"{d.median:g} [{d.q1:g}–{d.q3:g}], {d.min:g}–{d.max:g}")


def _times(v: float | None) -> str:
    return NA if v is None else f"{v:.2f}×"


def _rise(v: float | None) -> str:
    return NA if v is None else f"{v:+.1f}%"


def _mtok(v: float | None) -> str:
    return NA if v is None else f"{v / 1e6:.3g}"


def _yes(v: bool | None) -> str:
    return NA if v is None else ("yes" if v else "no")


def agency_table(report: AgencyReport, title: str) -> RenderableType:
    """AgencyBench per configuration: S_avg, Att, Pass@k over scenarios (the paper's unit) and
    over tasks, each with Rise, Tok (M per scenario), E_att, E_tok; the scenario-level figures
    (scenario-weighted S_avg, Att per scenario, Avg(k), T); one row per scenario;
    per-capability S_avg; tool invocation shares."""
    ks = report.ks
    table = Table(title=title, title_justify="left")
    for col in ("configuration", "scen.", "tasks", "S_avg", "Att",
                *(f"Pass@{k} scen." for k in ks), "Rise scen.",
                *(f"Pass@{k} tasks" for k in ks), "Rise tasks", "Tok (M)", "Turns", "E_att",
                "E_tok"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for r in report.rows:
        s = r.summary
        if s is None:
            table.add_row(_label(r.label, r.model), "0", "0", *([NA] * (len(ks) * 2 + 8)))
            continue
        ci = r.ci.get("s_avg")
        table.add_row(
            _label(r.label, r.model), str(s.n_scenarios), str(s.n_tasks),
            f"{s.s_avg:.1f}" + (f" [{ci.low:.1f}, {ci.high:.1f}]" if ci else ""),
            _f(s.att, ".2f"), *(_pct(s.pass_at_scenario.get(k)) for k in ks),
            _rise(s.rise_scenario), *(_pct(s.pass_at.get(k)) for k in ks), _rise(s.rise),
            _mtok(s.tokens_per_scenario), _f(r.turns_per_task, ".1f"), _f(s.e_att, ".1f"),
            _f(s.e_tok_m, ".3g"))
    parts: list[RenderableType] = [table]
    more = Table("configuration", "S_avg scen.-weighted", "Att per scen.",
                 *(f"Avg({k})" for k in ks), "T (h/scen.)", "skipped",
                 title="scenario figures", title_justify="left")
    for r in report.rows:
        s = r.summary
        more.add_row(_label(r.label, r.model), _f(s.s_avg_scenario_weighted if s else None, ".1f"),
                     _f(s.att_scenario_macro if s else None, ".2f"),
                     *(_f(s.avg_at.get(k) if s else None, ".1f") for k in ks),
                     _f(s.hours_per_scenario if s else None, ".3g"),
                     str(s.n_skipped) if s else NA)
    parts.append(more)
    scen = Table("configuration", "scenario", "capability", "tasks", "S_avg", "Att",
                 "passed tasks", "rounds", *(f"pass@{k}" for k in ks), "Tok (M)", "T (h)",
                 title=f"per scenario (scenario pass rule: {report.scenario_pass_rule}, "
                       "an inference)", title_justify="left")
    for r in report.rows:
        for sc in r.summary.scenarios if r.summary else []:
            tasks = str(sc.n_tasks) + (f" ({sc.n_skipped} skipped)" if sc.n_skipped else "")
            scen.add_row(_label(r.label, r.model), sc.scenario, sc.category or NA, tasks,
                         f"{sc.s_avg:.1f}", _f(sc.att, ".2f"), f"{sc.passed}/{sc.n_tasks}",
                         str(sc.rounds), *(_yes(sc.passed_at.get(k)) for k in ks),
                         _mtok(sc.tokens), _f(sc.hours, ".3g"))
    if scen.row_count:
        parts.append(scen)
    categories = sorted({c for r in report.rows for c in r.by_category})
    if categories:
        caps = Table("configuration", *categories, title="S_avg per capability (task category)",
                     title_justify="left")
        for r in report.rows:
            caps.add_row(_label(r.label, r.model),
                         *(_f(r.by_category.get(c), ".1f") for c in categories))
        parts.append(caps)
    if any(r.tools for r in report.rows):
        tools = Table("configuration", "invocations", "tools (share)",
                      title="tool invocations", title_justify="left")
        for r in report.rows:
            total = sum(r.tools.values())
            top = ", ".join(f"{name} {n / total:.0%}" for name, n in list(r.tools.items())[:6])
            more_tools = len(r.tools) - 6
            tools.add_row(_label(r.label, r.model), str(total),
                          (top + (f", +{more_tools} more" if more_tools > 0 else ""))
                          if total else NA)
        parts.append(tools)
    parts.append(Text(f"S_avg in %, Att = rounds used per task that ran (rounds: "
                      f"{report.rounds_source}), Pass@k scen. = scenarios passed within k rounds "
                      "/ scenarios, Tok = millions of tokens per scenario, E_att = S_avg/Att, "
                      "E_tok = S_avg/Tok, Avg(k) = mean score after k rounds, T = agent hours",
                      style="dim"))
    parts += [Text(f"note: {n}", style="yellow") for n in report.notes]
    return Group(*parts)

"""Rich rendering of a :class:`~agentmeter.metrics.Scorecard` (the AgentMeter leaderboard) and
of the other analysis results (pass@k, effort allocation, rank agreement; the benchmarks' own
tables: benchmark_tables.py), and ``metric_view``, which picks a report's view. ``n/a`` marks a
value that could not be computed; nothing unknown is shown as zero."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pydantic import BaseModel
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.table import Table
from rich.text import Text

from agentmeter.metrics import TIERS, ConfigRow, PassK, RankAgreement, Scorecard
from agentmeter.metrics.allocation import EffortAllocation, PassFailSplit
from agentmeter.metrics.from_store import AgencyReport, FunnelReport
from agentmeter.metrics.registry import PassKReport
from agentmeter.records import is_scripted
from agentmeter.report.benchmark_tables import agency_table, funnel_table
from agentmeter.report.cells import NA, _f, _scripted_mark, _tok, _usd


def _ci(row: ConfigRow, name: str, fmt: str = ".3f") -> str:
    ci = row.ci.get(name)
    return "" if ci is None else f" [{ci.low:{fmt}}, {ci.high:{fmt}}]"


def leaderboard(card: Scorecard, title: str, *, by: str = "ams",
                scripted: Collection[str] | None = None, pass_interval: bool = True) -> Table:
    """The terminal leaderboard (``score`` and ``report``): Pass, passes per tier, Tok/Pass,
    USD/Pass, tier scores, AMS with its interval, Δbest; winners by AMS in bold. Rows in
    :meth:`Scorecard.ranked` order ``by``. ``scripted`` names the configurations driven by the
    scripted test model (default: by model name); ``pass_interval`` shows the pass rate's
    bootstrap interval next to it."""
    marked = (set(scripted) if scripted is not None
              else {r.config_id for r in card.rows if is_scripted(r.model)})
    table = Table(title=title, title_justify="left")
    level = f" [{card.bootstrap.level:.0%} CI]" if card.bootstrap else ""
    for name in ("#", "configuration", "Pass", *(f"{g} pass" for g in TIERS), "Tok/Pass",
                 "USD/Pass", *(f"S_{g}" for g in TIERS), f"AMS{level}", "Δbest"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    winners = set(card.winners.ams)
    for i, k in enumerate(card.ranked(by), start=1):
        r = card.rows[k]
        passes = (NA if not r.n_scored else f"{r.passes}/{r.n_tasks} {_f(r.pass_rate, '.0%')}"
                  + (_ci(r, "pass_rate", ".0%") if pass_interval else ""))
        cells = [str(i), _scripted_mark(r.label, r.config_id in marked), passes]
        for g in TIERS:
            t = r.tiers.get(g)
            cells.append(NA if t is None or not t.n_counted else f"{t.passes}/{t.n_counted}")
        cells += [_tok(r.tok_per_pass), _usd(r.usd_per_pass)]
        for g in TIERS:
            t = r.tiers.get(g)
            cells.append(_f(t.score if t else None))
        ams = _f(r.ams) + _ci(r, "ams")
        cells.append(f"[bold]{ams}[/bold]" if r.config_id in winners else ams)
        cells.append(_f(r.delta_best))
        table.add_row(*cells)
    return table


def repeated_reads_table(card: Scorecard) -> Table:
    """Repeated file reads per configuration over its selected trials (descriptive)."""
    table = Table("configuration", "trajectories", "repeated reads", "per trajectory", "max",
                  "with repeats", "not recorded",
                  title="repeated file reads (selected trials; not an AMS component)",
                  title_justify="left")
    for k in card.ranked():
        r = card.rows[k]
        rr = r.repeated_reads
        if rr is None:
            table.add_row(r.label, "0", NA, NA, NA, NA, "0")
            continue
        table.add_row(r.label, str(rr.trajectories), str(rr.total) if rr.trajectories else NA,
                      _f(rr.mean, ".2f"), NA if rr.max is None else str(rr.max),
                      f"{rr.with_repeats}/{rr.trajectories}" if rr.trajectories else NA,
                      str(rr.not_recorded))
    return table


def _labels(card: Scorecard, ids: Sequence[str]) -> str:
    names = {r.config_id: r.label for r in card.rows}
    return ", ".join(names.get(i, i) for i in ids) or NA


def details(card: Scorecard) -> RenderableType:
    """Winners per criterion, the tier setup (budgets, τ), model spreads and notes."""
    parts: list[RenderableType] = []
    w = card.winners
    win = Table("criterion", "winner", title="winners", title_justify="left")
    for name, ids in (("most passes", w.passes), ("fewest tokens per pass", w.tok_per_pass),
                      ("lowest USD per pass", w.usd_per_pass), ("highest AMS", w.ams)):
        win.add_row(name, _labels(card, ids))
    parts.append(win)
    setup = Table("tier", "tasks", "budget grid B_g (USD)", "τ_g (USD)",
                  title=f"tiers ({card.tier_source}); budgets: {card.budget_source}; "
                        f"α = {card.alpha:g}; infra_invalid: {card.infra_policy}",
                  title_justify="left")
    for t in card.tiers:
        setup.add_row(t.tier, str(t.n_tasks),
                      NA if t.budgets is None else ", ".join(f"{b:g}" for b in t.budgets),
                      NA if t.tau is None else f"{t.tau:g}")
    parts.append(setup)
    parts.append(repeated_reads_table(card))
    if card.models:
        spread = Table("model", "best agent", "AMS", "worst agent", "AMS", "spread",
                       title="agent choice per model", title_justify="left")
        for m in card.models:
            spread.add_row(m.model, m.best_agent, f"{m.best_ams:.3f}", m.worst_agent,
                           f"{m.worst_ams:.3f}", f"{m.spread:.3f}")
        parts.append(spread)
    if card.bootstrap is not None:
        b = card.bootstrap
        parts.append(Text(f"CIs: {b.resamples} bootstrap resamples of tasks within tiers"
                          + (" and attempts" if b.over_attempts else "")
                          + f", {b.level:.0%} percentile, seed {b.seed}", style="dim"))
    for note in card.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)


def passk_table(rows: list[PassK], labels: dict[str, str]) -> Table:
    k = rows[0].k if rows else 1
    table = Table("configuration", f"pass@{k}", f"pass^{k}", "tasks",
                  f"tasks with < {k} attempts", title=f"pass@{k} / pass^{k}",
                  title_justify="left")
    for r in rows:
        cis = {name: "" if name not in r.ci else f" [{r.ci[name].low:.3f}, {r.ci[name].high:.3f}]"
               for name in ("pass_at_k", "pass_hat_k")}
        table.add_row(labels.get(r.config_id, r.config_id), _f(r.pass_at_k) + cis["pass_at_k"],
                      _f(r.pass_hat_k) + cis["pass_hat_k"], str(r.n_tasks), str(r.n_tasks_short))
    return table


def allocation_table(alloc: EffortAllocation) -> Table:
    table = Table("scope", "outcome", "runs", "median tok", "mean tok", "median USD",
                  "mean USD", title="effort allocation (selected scored trials)",
                  title_justify="left")
    scopes: list[tuple[str, PassFailSplit]] = [("all", alloc.overall)]
    scopes += [(g, alloc.tiers[g]) for g in TIERS if g in alloc.tiers]
    for scope, split in scopes:
        for outcome, st in (("passed", split.passed), ("failed", split.failed)):
            table.add_row(scope, outcome, str(st.n), _tok(st.median_tokens),
                          _tok(st.mean_tokens), _usd(st.median_usd), _usd(st.mean_usd))
    return table


def agreement_table(a: RankAgreement, ref: str, other: str) -> Table:
    table = Table("measure", "value", title=f"rank agreement of {other} with {ref} "
                  f"({a.n} configurations scored in both)", title_justify="left")

    def yes(v: bool | None) -> str:
        return NA if v is None else ("yes" if v else "no")

    table.add_row("Spearman ρ", _f(a.spearman))
    table.add_row("Kendall τ-b", _f(a.kendall))
    table.add_row("MAE of AMS", _f(a.mae, ".4f"))
    table.add_row("Top-1 kept", yes(a.top1_kept))
    table.add_row(f"Top-{a.k} kept", yes(a.topk_kept))
    return table


def ams_side_by_side(ref: Scorecard, other: Scorecard, ref_name: str,
                     other_name: str) -> Table:
    table = Table("configuration", f"AMS {ref_name}", f"AMS {other_name}", "Δ",
                  title="AMS per configuration", title_justify="left")
    others = {r.config_id: r for r in other.rows}
    for k in ref.ranked():
        r = ref.rows[k]
        o = others.get(r.config_id)
        delta = None if (o is None or o.ams is None or r.ams is None) else o.ams - r.ams
        table.add_row(r.label, _f(r.ams), _f(o.ams if o else None),
                      NA if delta is None else f"{delta:+.3f}")
    return table


def metric_view(name: str, report: BaseModel, what: str, labels: dict[str, str]
                ) -> list[RenderableType]:
    """The terminal view of one ``score --metric`` report: its own table where one exists here,
    else the report as JSON (a newly registered metric shows at once)."""
    if isinstance(report, Scorecard):
        return [leaderboard(report, f"AgentMeter leaderboard: {what} ({report.n_tasks} tasks)"),
                details(report)]
    if isinstance(report, PassKReport):
        return [passk_table(report.root, labels)]
    if isinstance(report, EffortAllocation):
        return [allocation_table(report)]
    if isinstance(report, FunnelReport):
        return [funnel_table(report, f"CLI-Tool-Bench funnel: {what}")]
    if isinstance(report, AgencyReport):
        return [agency_table(report, f"AgencyBench metrics: {what}")]
    return [Text(f"{name}: {what}", style="bold"), JSON(report.model_dump_json())]

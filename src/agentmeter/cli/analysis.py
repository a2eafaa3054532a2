"""Analysis commands: ``score``, ``compare``, ``reprice`` (its own module: reprice.py),
``core-subset``. Thin, like every command module: parse, call metrics/pricing/store, print."""

from __future__ import annotations

import functools
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentmeter.cli.common import JsonOpt, StoreOpt, console, fail, open_store
from agentmeter.cli.reprice import reprice_cmd
from agentmeter.metrics.choices import (
    BUDGET_ROUNDINGS,
    DUPLICATE_BUDGETS,
    INFRA_POLICIES,
    PER_PASS_SPENDS,
)

if TYPE_CHECKING:
    from agentmeter.metrics.budgets import BudgetSpec
    from agentmeter.metrics.frame import TrialFrame
    from agentmeter.metrics.registry import MetricInputs
    from agentmeter.metrics.scorecard import Scorecard
    from agentmeter.metrics.scoring import ScoringSpec
    from agentmeter.pricing.book import PriceBook
    from agentmeter.store.db import Store
    from agentmeter.store.queries import StoredTrials

TiersOpt = Annotated[str, typer.Option(
    "--tiers", help="calibrate (Eq. 1 on the scored runs), stored (the tasks' own tiers) or a "
    "TOML/JSON file mapping task -> tier")]
BudgetsOpt = Annotated[str, typer.Option(
    "--budgets", help="derive (calibration cost quantiles), table1 (the paper's) or a TOML file")]
PricesOpt = Annotated[list[Path] | None, typer.Option(
    "--prices", help="pricing snapshot TOML: reprice every trial from its usage; repeatable")]
SubsetOpt = Annotated[str | None, typer.Option(
    "--subset", help="score a named subset of the run's suite (tiers and budgets stay fixed "
    "on the full run)")]
SuiteOpt = Annotated[Path | None, typer.Option(
    "--suite", help="suite dir for --subset (default: the run's own suite)")]
InfraOpt = Annotated[str, typer.Option(
    "--infra-invalid", help="an infra_invalid selected trial in CBQ/CostAUBQC/EFR/SR: zero "
    "(default; the paper: missing, task-invalid, failed and over-budget trials contribute zero) "
    "or exclude (left out of the tier's denominator)")]
DupOpt = Annotated[str, typer.Option(
    "--duplicate-budgets", help="derived budget grids: keep (default; one point per quantile, "
    "five like Table 1, even when rounded points coincide) or merge (equal points once)")]
RoundOpt = Annotated[str, typer.Option(
    "--budget-rounding", help="derived budget grids and τ: cents (default; the paper's "
    "'rounded tier-specific cost quantiles', Table 1 lists cents; a value that would round to 0 "
    "keeps 2 significant figures) or none (unrounded). docs/metrics.md, Budget rounding")]
SpendOpt = Annotated[str, typer.Option(
    "--per-pass-spend", help="Tok./Pass and USD/Pass numerators: all (default; every completed "
    "try of every attempt, the paper's 'Attempted runs remain part of token and cost "
    "accounting') or selected (the tries of the selected attempt per configuration and task "
    "only; with --attempts N the default grows with N)")]
FallbackOpt = Annotated[str, typer.Option(
    "--cache-price-fallback", help="cache tokens whose price entry has no cache price: none "
    "(default; their cost is n/a) or input (billed at the input rate, said in the notes)")]
_TIERS = ("easy", "medium", "hard")


# --- shared option handling ----------------------------------------------------------------

def _tier_file(path: Path) -> dict[str, str]:
    """task -> tier from {task: tier}, {easy: [tasks], ...} or a calibration's {tasks: [...]}."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise fail(f"{path}: {e}") from None
    data = data.get("tiers", data) if isinstance(data, dict) else data
    out: dict[str, str] = {}
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        data = {t.get("task_id"): t.get("tier") for t in data["tasks"] if isinstance(t, dict)}
    if not isinstance(data, dict):
        raise fail(f"{path}: expected a table of task -> tier")
    for key, value in data.items():
        if key in _TIERS and isinstance(value, list):
            out.update({str(t): key for t in value})
        elif isinstance(value, str) and value in _TIERS:
            out[str(key)] = value
        else:
            raise fail(f"{path}: field {key}: expected easy/medium/hard or a list of task ids "
                        "under a tier name")
    return out


def _budgets(value: str) -> BudgetSpec | None:
    from agentmeter.metrics.budgets import BudgetError, BudgetSpec, table1

    if value == "derive":
        return None
    if value == "table1":
        return table1()
    try:
        return BudgetSpec.load(Path(value))
    except BudgetError as e:
        raise fail(str(e)) from None


def _book(prices: list[Path] | None, fallback: str = "none") -> PriceBook:
    from agentmeter.pricing.book import PriceBook
    from agentmeter.pricing.formula import CACHE_FALLBACKS
    from agentmeter.pricing.snapshot import PricingError

    choice("--cache-price-fallback", fallback, CACHE_FALLBACKS)
    try:
        return PriceBook.load(prices or [],
                              cache_price_fallback="input" if fallback == "input" else None)
    except PricingError as e:
        raise fail(str(e)) from None


def _subset_ids(store: Store, run_id: str, subset: str, suite: Path | None) -> list[str]:
    from agentmeter.tasks.errors import TaskError
    from agentmeter.tasks.suite import SUITE_TOML, load_suite, load_suites

    try:
        if suite is not None:
            s = load_suite(suite)
        else:
            rec = store.get_run(run_id)
            sources = ((rec.settings.get("request") or {}).get("suites") if rec else None)
            if not sources:
                raise fail(f"run {run_id} records no suite: pass --suite DIR for --subset")
            s = load_suites(sources)
    except TaskError as e:
        raise fail(str(e)) from None
    if subset not in s.subsets:
        raise fail(f"{s.path / SUITE_TOML}: no subset {subset!r} (known: "
                    f"{', '.join(sorted(s.subsets)) or 'none'})")
    return list(s.subsets[subset])


def _frames(store: Store, runs: list[str], subset: str | None, suite: Path | None,
            tiers: str) -> tuple[TrialFrame, TrialFrame, str]:
    """(frame to score, calibration pool, tier mode)."""
    from agentmeter.metrics.loader import load_frame
    from agentmeter.store.db import StoreError

    try:
        full = load_frame(store, runs)
    except StoreError as e:
        raise fail(str(e)) from None
    mode = tiers
    if tiers not in ("calibrate", "stored"):
        full = full.with_tiers(_tier_file(Path(tiers)))
        mode = "stored"
    frame = full
    if subset is not None:
        ids = _subset_ids(store, runs[0], subset, suite)
        absent = [t for t in ids if t not in full.task_ids]
        if absent:
            raise fail(f"subset {subset!r}: task(s) not in run(s) {', '.join(runs)}: "
                        + ", ".join(absent[:10]))
        frame = full.select_tasks(ids)
    return frame, full, mode


def choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if allowed, else a one-line error naming the allowed values."""
    if value not in allowed:
        raise fail(f"{option} {value!r}: use {' or '.join(allowed)}")
    return value


def _spec(mode: str, alpha: float | None, resamples: int, reprice: bool,
          infra: str = "zero", duplicates: str = "keep", rounding: str = "cents",
          spend: str = "all") -> ScoringSpec:
    from agentmeter.metrics.scoring import ScoringSpec

    choice("--infra-invalid", infra, INFRA_POLICIES)
    choice("--duplicate-budgets", duplicates, DUPLICATE_BUDGETS)
    choice("--budget-rounding", rounding, BUDGET_ROUNDINGS)
    choice("--per-pass-spend", spend, PER_PASS_SPENDS)
    return ScoringSpec.model_validate({"tiers": mode, "alpha": alpha, "resamples": resamples,
                                       "reprice": reprice, "infra_invalid": infra,
                                       "duplicate_budgets": duplicates,
                                       "budget_rounding": rounding,
                                       "per_pass_spend": spend})


# --- score ---------------------------------------------------------------------------------

def score_cmd(
    runs: Annotated[list[str], typer.Argument(help="run id(s); several are pooled")],
    metric: Annotated[str, typer.Option(
        help="ams | passk | allocation | funnel (CLI-Tool-Bench) | agency (AgencyBench) | all "
        "(funnel and agency when the run has their data), or a plug-in metric: "
        "package.module:function or an installed one (agentmeter plugins)")] = "ams",
    tiers: TiersOpt = "calibrate", budgets: BudgetsOpt = "derive",
    subset: SubsetOpt = None, suite: SuiteOpt = None,
    alpha: Annotated[float | None, typer.Option(help="TierScore trade-off α (default 0.6)")] = None,
    resamples: Annotated[int, typer.Option(help="bootstrap resamples for CIs (0 = none)")] = 0,
    k: Annotated[int | None, typer.Option(help="k for pass@k (default: attempts per task)")] = None,
    scenario_pass: Annotated[str, typer.Option(
        "--scenario-pass", help="AgencyBench Pass@k over scenarios: a scenario passes when its "
        "mean task score is >= 6 (mean) or when all its tasks pass (all); the paper does not "
        "say which")] = "mean",
    infra_invalid: InfraOpt = "zero", duplicate_budgets: DupOpt = "keep",
    budget_rounding: RoundOpt = "cents", per_pass_spend: SpendOpt = "all",
    cache_price_fallback: FallbackOpt = "none",
    prices: PricesOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Score runs: the AgentMeter leaderboard (Pass, Tok/Pass, USD/Pass, tier scores, AMS with
    CIs, Δbest, winners), pass@k, effort allocation, the CLI-Tool-Bench funnel and the
    AgencyBench metrics (docs/metrics.md)."""
    from agentmeter.metrics.registry import METRICS, MetricError, MetricInputs, metric_names
    from agentmeter.metrics.registry import compute as compute_metrics
    from agentmeter.plugins import is_import_path
    from agentmeter.report import scorecard_table as view
    from agentmeter.report.summary import evaluation_table
    from agentmeter.store.db import StoreError
    from agentmeter.store.queries import evaluation_costs, selected_trials

    if metric not in (*metric_names(), "all") and not is_import_path(metric):
        raise fail(f"--metric {metric!r}: use {', '.join(metric_names())}, all, or "
                   "package.module:function")
    if alpha is not None and not 0 <= alpha <= 1:
        raise fail("--alpha must be in [0, 1]")
    if resamples < 0:
        raise fail("--resamples must be >= 0")
    _spec("calibrate", None, 0, False, infra_invalid, duplicate_budgets, budget_rounding)  # options first
    book = _book(prices, cache_price_fallback)
    st = open_store(store)
    frame, pool, mode = _frames(st, runs, subset, suite, tiers)
    spec = _spec(mode, alpha, resamples, bool(prices), infra_invalid, duplicate_budgets,
                 budget_rounding, per_pass_spend)
    fixed = _budgets(budgets)

    @functools.cache
    def trials() -> StoredTrials:
        try:
            return selected_trials(st, runs, set(frame.task_ids))
        except StoreError as e:
            raise fail(str(e)) from None

    def inputs(asked: bool) -> MetricInputs:
        return MetricInputs(frame=frame, pool=pool, spec=spec, prices=book, repriced=bool(prices),
                            budgets=fixed, k=k, resamples=resamples, trials=trials, asked=asked,
                            scenario_pass_rule=scenario_pass)

    try:
        reports = compute_metrics([metric], inputs)
    except MetricError as e:
        raise fail(str(e)) from None
    judged = evaluation_costs(st, runs)  # the judges' cost, apart from the agents'
    if as_json:
        out: dict[str, Any] = {"runs": runs, "subset": subset}
        for name, report in reports.items():
            out[METRICS[name].key if name in METRICS else name] = report.model_dump(mode="json")
        if judged:
            out["evaluation"] = {cid: {"models": list(c.models), "calls": c.calls,
                                       "usage": c.usage.model_dump(), "cost_usd": c.cost_usd}
                                 for cid, c in judged.items()}
        print(json.dumps(out, indent=1))
        return
    what = ", ".join(runs) + (f" (subset {subset})" if subset else "")
    labels = {c.id: c.label for c in frame.configs}
    for name, report in reports.items():
        for part in view.metric_view(name, report, what, labels):
            console.print(part)
    if judged:
        console.print(evaluation_table(judged, labels))


# --- compare -------------------------------------------------------------------------------

def _scorecard_file(path: Path) -> Scorecard:
    from agentmeter.metrics.scorecard import Scorecard

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Scorecard.model_validate(data.get("scorecard", data))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise fail(f"{path}: not a scorecard (agentmeter score --json output): "
                    f"{str(e).splitlines()[0]}") from None


def compare_cmd(
    a: Annotated[str, typer.Argument(help="reference: RUN, RUN@SUBSET or a score --json file")],
    b: Annotated[str | None, typer.Argument(help="other: RUN, RUN@SUBSET or a JSON file "
                                                 "(default: A@--subset)")] = None,
    subset: SubsetOpt = None, suite: SuiteOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", help="k of Top-k kept")] = 3,
    tiers: TiersOpt = "calibrate", budgets: BudgetsOpt = "derive", prices: PricesOpt = None,
    infra_invalid: InfraOpt = "zero", duplicate_budgets: DupOpt = "keep",
    budget_rounding: RoundOpt = "cents", cache_price_fallback: FallbackOpt = "none",
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Rank agreement of two scorings (Spearman, Kendall τ-b, MAE of AMS, Top-1/Top-k kept):
    two runs, or a subset against its full run. Tiers and budgets are fixed on A's full run."""
    from agentmeter.metrics.scoring import score
    from agentmeter.metrics.validation import compare_scorecards
    from agentmeter.report import scorecard_table as view

    if b is None:
        if subset is None:
            raise fail("give B, or --subset NAME to compare a subset with the full run A")
        b = f"{a.partition('@')[0]}@{subset}"
    if top_k < 1:
        raise fail("--top-k must be >= 1")
    _spec("calibrate", None, 0, False, infra_invalid, duplicate_budgets, budget_rounding)
    book = _book(prices, cache_price_fallback)
    st: Store | None = None
    pool: TrialFrame | None = None
    cards: list[Scorecard] = []
    for spec_text in (a, b):
        if spec_text.endswith(".json") and Path(spec_text).is_file():
            cards.append(_scorecard_file(Path(spec_text)))
            continue
        st = st or open_store(store)
        run, _, sub = spec_text.partition("@")
        frame, full, mode = _frames(st, [run], sub or None, suite, tiers)
        pool = pool if pool is not None else full
        cards.append(score(frame, _spec(mode, None, 0, bool(prices), infra_invalid,
                                        duplicate_budgets, budget_rounding), prices=book,
                           budgets=_budgets(budgets), calibration_frame=pool))
    agreement = compare_scorecards(cards[0], cards[1], top_k)
    if as_json:
        others = {r.config_id: r.ams for r in cards[1].rows}
        print(json.dumps({"reference": a, "other": b, **agreement.model_dump(mode="json"),
                          "ams": {r.config_id: [r.ams, others.get(r.config_id)]
                                  for r in cards[0].rows}}, indent=1))
        return
    console.print(view.ams_side_by_side(cards[0], cards[1], a, b))
    console.print(view.agreement_table(agreement, a, b))


# --- core subset ---------------------------------------------------------------------------

_SUBSET_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _save_subset(suite_dir: Path, name: str, task_ids: list[str]) -> Path:
    """Add ``name = [...]`` under [subsets] of the suite's suite.toml (other content kept)."""
    from agentmeter.tasks.errors import TaskError
    from agentmeter.tasks.suite import SUITE_TOML, load_suite

    try:
        suite = load_suite(suite_dir)
    except TaskError as e:
        raise fail(str(e)) from None
    file = suite.path / SUITE_TOML
    unknown = [t for t in task_ids if t not in suite.task_ids]
    if unknown:
        raise fail(f"{suite.path}: the suite has no task(s) {', '.join(unknown)}")
    if name in suite.subsets:
        raise fail(f"{file}: subset {name!r} exists already; choose another --save name")
    text = file.read_text(encoding="utf-8") if file.is_file() else ""
    line = f"{name} = [{', '.join(json.dumps(t) for t in task_ids)}]\n"
    header = re.search(r"^\[subsets\][ \t]*(#.*)?$", text, flags=re.MULTILINE)
    if header:
        at = header.end() + 1
        new = text[:at] + line + text[at:]
    elif "subsets" in tomllib.loads(text):
        raise fail(f"{file}: subsets are not written as a [subsets] table; add "
                    f"{line.strip()!r} by hand")
    else:
        new = text + ("" if text.endswith("\n") or not text else "\n") + "\n[subsets]\n" + line
    if tomllib.loads(new).get("subsets", {}).get(name) != task_ids:
        raise fail(f"{file}: could not add subset {name!r} safely; add {line.strip()!r} by hand")
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(file)
    return file


def core_subset_cmd(
    run_id: Annotated[str, typer.Argument(help="run id (the full calibration run)")],
    per_tier: Annotated[int, typer.Option("--per-tier", help="tasks per tier")],
    save: Annotated[str | None, typer.Option(help="save as this subset name in suite.toml")
                    ] = None,
    suite: SuiteOpt = None, tiers: TiersOpt = "calibrate", budgets: BudgetsOpt = "derive",
    infra_invalid: InfraOpt = "zero", duplicate_budgets: DupOpt = "keep",
    budget_rounding: RoundOpt = "cents", cache_price_fallback: FallbackOpt = "none",
    prices: PricesOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Pick K tasks per tier whose AMS ranking best preserves the full run's (stratified core
    subset, AgentMeter §5.4); optionally save it as a named subset of the suite."""
    from agentmeter.metrics.scoring import prepare
    from agentmeter.metrics.validation import select_core
    from agentmeter.report import scorecard_table as view

    if per_tier < 1:
        raise fail("--per-tier must be >= 1")
    _spec("calibrate", None, 0, False, infra_invalid, duplicate_budgets, budget_rounding)
    book = _book(prices, cache_price_fallback)
    st = open_store(store)
    frame, _, mode = _frames(st, [run_id], None, None, tiers)
    p = prepare(frame, _spec(mode, None, 0, bool(prices), infra_invalid, duplicate_budgets,
                             budget_rounding),
                prices=book,
                budgets=_budgets(budgets))
    if len(p.frame.configs) < 2:
        raise fail(f"run {run_id} has {len(p.frame.configs)} configuration(s): a ranking needs "
                    "at least two")
    core = select_core(p.cells, p.plan, p.frame.task_ids, per_tier)
    ids = [t for g in _TIERS for t in core.tasks.get(g, [])]
    saved = None
    if save is not None:
        if not _SUBSET_NAME.match(save):
            raise fail(f"--save {save!r}: use letters, digits, '_' and '-'")
        if suite is None:
            rec = st.get_run(run_id)
            sources = (rec.settings.get("request") or {}).get("suites") if rec else None
            if not sources or len(sources) != 1 or not Path(sources[0]).is_dir():
                raise fail(f"run {run_id}: pass --suite DIR to say where to save the subset")
            suite = Path(sources[0])
        saved = _save_subset(suite, save, ids)
    if as_json:
        print(json.dumps({**core.model_dump(mode="json"), "saved_to": str(saved) if saved
                          else None, "notes": p.notes}, indent=1))
        return
    for g in _TIERS:
        console.print(f"[bold]{g}[/bold] ({len(core.tasks.get(g, []))}): "
                      + ", ".join(core.tasks.get(g, [])))
    a = core.agreement
    console.print(view.agreement_table(a, "full run", f"core subset ({len(ids)} tasks)"))
    if saved:
        console.print(f"saved as subset [bold]{save}[/bold] in {saved}")


def register(app: typer.Typer) -> None:
    app.command("score")(score_cmd)
    app.command("compare")(compare_cmd)
    app.command("reprice")(reprice_cmd)
    app.command("core-subset")(core_subset_cmd)

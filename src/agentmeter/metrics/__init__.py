"""agentmeter.metrics: AgentMeter scoring (AMS, calibration, diagnostics), validation,
uncertainty, pass@k, the CLI-Tool-Bench funnel and AgencyBench metrics.

Metrics read only from the store (:func:`load_frame`) or from a :class:`TrialFrame` built from
arrays (:func:`frame_from_arrays`), so imported data scores the same way.
"""

from typing import TYPE_CHECKING

from agentmeter.lazy import lazy_exports

# The names below are imported on first use (PEP 562), not with the package: a submodule
# (``agentmeter.metrics.<module>``) imports without the others, and the command
# line starts without numpy, SQLAlchemy or aiohttp (tests/test_cli_start.py).
if TYPE_CHECKING:
    from agentmeter.metrics.allocation import EffortAllocation, effort_allocation
    from agentmeter.metrics.ams import cbq, cost_aubqc, efr, tier_score
    from agentmeter.metrics.budgets import BudgetError, BudgetSpec, TierBudget, derive_budgets, table1
    from agentmeter.metrics.cost import UsdRates, billable_cost, resolve_costs
    from agentmeter.metrics.effort import Calibration, calibrate, effort_score, percentile_rank
    from agentmeter.metrics.frame import (
        STATUS_CODE,
        STATUSES,
        TIERS,
        ConfigInfo,
        TrialFrame,
        cell_matrix,
        frame_from_arrays,
        selected_mask,
    )
    from agentmeter.metrics.loader import load_frame
    from agentmeter.metrics.passk import PassK, pass_at_k, pass_hat_k, pass_k_by_config
    from agentmeter.metrics.scorecard import ConfigRow, Interval, ModelSummary, Scorecard, Winners
    from agentmeter.metrics.scoring import Prepared, ScoringSpec, prepare, score
    from agentmeter.metrics.validation import (
        CoreSubset,
        RankAgreement,
        compare_scorecards,
        kendall_tau_b,
        rank_agreement,
        select_core,
        spearman,
    )

#: name -> the module that defines it
_LAZY: dict[str, str] = {name: module for module, names in {
    "agentmeter.metrics.allocation": ("EffortAllocation", "effort_allocation"),
    "agentmeter.metrics.ams": ("cbq", "cost_aubqc", "efr", "tier_score"),
    "agentmeter.metrics.budgets": (
        "BudgetError", "BudgetSpec", "TierBudget", "derive_budgets", "table1",
    ),
    "agentmeter.metrics.cost": ("UsdRates", "billable_cost", "resolve_costs"),
    "agentmeter.metrics.effort": ("Calibration", "calibrate", "effort_score", "percentile_rank"),
    "agentmeter.metrics.frame": (
        "ConfigInfo", "STATUSES", "STATUS_CODE", "TIERS", "TrialFrame", "cell_matrix",
        "frame_from_arrays", "selected_mask",
    ),
    "agentmeter.metrics.loader": ("load_frame",),
    "agentmeter.metrics.passk": ("PassK", "pass_at_k", "pass_hat_k", "pass_k_by_config"),
    "agentmeter.metrics.scorecard": (
        "ConfigRow", "Interval", "ModelSummary", "Scorecard", "Winners",
    ),
    "agentmeter.metrics.scoring": ("Prepared", "ScoringSpec", "prepare", "score"),
    "agentmeter.metrics.validation": (
        "CoreSubset", "RankAgreement", "compare_scorecards", "kendall_tau_b", "rank_agreement",
        "select_core", "spearman",
    ),
}.items() for name in names}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "STATUSES", "STATUS_CODE", "TIERS", "BudgetError", "BudgetSpec", "Calibration", "ConfigInfo",
    "ConfigRow", "CoreSubset", "EffortAllocation", "Interval", "ModelSummary", "PassK",
    "Prepared", "RankAgreement", "Scorecard", "ScoringSpec", "TierBudget", "TrialFrame",
    "UsdRates", "Winners", "billable_cost", "calibrate", "cbq", "cell_matrix",
    "compare_scorecards", "cost_aubqc",
    "derive_budgets", "effort_allocation", "effort_score", "efr", "frame_from_arrays",
    "kendall_tau_b", "load_frame", "pass_at_k", "pass_hat_k", "pass_k_by_config",
    "percentile_rank", "prepare", "rank_agreement", "resolve_costs", "score", "select_core",
    "selected_mask", "spearman", "table1", "tier_score",
]

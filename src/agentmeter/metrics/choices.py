"""The values of the scoring options (``--infra-invalid``, ``--duplicate-budgets``, ``--sort``),
in a module of their own: the command line shows them in its help without importing numpy."""

from __future__ import annotations

from typing import Literal

InfraPolicy = Literal["zero", "exclude"]
#: the readings of an infra_invalid cell, the paper's first (the default)
INFRA_POLICIES: tuple[InfraPolicy, ...] = ("zero", "exclude")

#: derived grids: keep a point per quantile (the paper's five; default) or merge equal ones
DuplicateBudgets = Literal["keep", "merge"]
DUPLICATE_BUDGETS: tuple[DuplicateBudgets, ...] = ("keep", "merge")

#: derived grids and τ: rounded to cents (the paper's reading, Table 1; default) or unrounded
BudgetRounding = Literal["cents", "none"]
BUDGET_ROUNDINGS: tuple[BudgetRounding, ...] = ("cents", "none")

#: Tok./Pass and USD/Pass numerators: every completed try of every attempt (the paper's §3.5
#: "Attempted runs remain part of token and cost accounting"; default) or the selected trials'
PerPassSpend = Literal["all", "selected"]
PER_PASS_SPENDS: tuple[PerPassSpend, ...] = ("all", "selected")

#: what a leaderboard can be ordered by (:meth:`~agentmeter.metrics.scorecard.Scorecard.ranked`)
LEADERBOARD_SORTS = ("ams", "pass", "usd", "tok")

"""The columnar trial frame every metric works on.

A :class:`TrialFrame` holds one row per *completed try* (final status) of a trial, as numpy
columns, plus small dimension tables for configurations and tasks. It is built by the store
loader (:mod:`agentmeter.metrics.loader`) or directly from arrays (imported data, benchmarks).

Selection rule (docs/architecture.md, AgentMeter §3.5; defined in :mod:`agentmeter.store.queries`): per
(config, task, attempt) the *latest completed try* is the selected trial — the one with the
highest ``try_order``, which the store computes (run creation order, then try number);
:func:`selected_mask` applies it on columns. The other tries (infra_invalid tries that were
retried) are kept as rows because their spending stays in cost accounting. :func:`cell_matrix`
then picks, per (config, task), the latest attempt whose selected try counts towards quality
(``TrialStatus.scored``; falling back to the latest attempt when every attempt is infra_invalid)
and lays the figures out as dense config × task matrices.

Unknown values are NaN, never zero: a token count the upstream did not expose, a cost that could
not be priced, a reward that was not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from agentmeter.records import FINAL_STATUSES, TrialStatus

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
CodeArray = NDArray[np.integer[Any]]
BoolArray = NDArray[np.bool_]

#: status codes used in :attr:`TrialFrame.status` (index into this tuple): the final statuses
STATUSES = tuple(st.value for st in FINAL_STATUSES)
STATUS_CODE = {name: code for code, name in enumerate(STATUSES)}
PASSED = STATUS_CODE[TrialStatus.PASSED.value]
#: per status code: does a try with that status count towards quality (``TrialStatus.scored``)
SCORED_STATUS = np.array([st.scored for st in FINAL_STATUSES], dtype=np.bool_)

Tier = Literal["easy", "medium", "hard"]
TIERS: tuple[Tier, Tier, Tier] = ("easy", "medium", "hard")

#: cell states in :attr:`CellMatrix.state`
MISSING, SCORED, INFRA = 0, 1, 2


@dataclass(frozen=True)
class ConfigInfo:
    id: str
    label: str
    model: str
    agent: str
    price_key: str | None = None


@dataclass(frozen=True)
class TrialFrame:
    """Completed tries as columns; ``config``/``task`` index :attr:`configs`/:attr:`task_ids`."""

    configs: list[ConfigInfo]
    task_ids: list[str]
    task_tiers: list[str | None]
    config: IntArray
    task: IntArray
    attempt: IntArray
    #: later tries sort higher within a (config, task, attempt); ties broken by row order
    try_order: IntArray
    status: IntArray
    reward: FloatArray
    passed: FloatArray  # 1.0 / 0.0 / NaN (not recorded)
    input: FloatArray
    output: FloatArray
    cache_creation: FloatArray
    cache_read: FloatArray
    reasoning: FloatArray
    cost_usd: FloatArray
    turns: FloatArray
    model_calls: FloatArray
    tool_calls: FloatArray
    task_categories: list[str | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: files read more than once by the try's agent (the runner's trajectory analytics;
    #: NaN where not recorded, e.g. imported data); empty = NaN for every row
    repeated_reads: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        n = len(self.config)
        if len(self.repeated_reads) == 0 and n:
            object.__setattr__(self, "repeated_reads", np.full(n, np.nan))
        for name in ROW_COLUMNS[1:]:
            if len(getattr(self, name)) != n:
                raise ValueError(f"TrialFrame column {name!r} has {len(getattr(self, name))} "
                                 f"rows, expected {n}")
        if len(self.task_tiers) != len(self.task_ids):
            raise ValueError("TrialFrame: task_tiers must have one entry per task id")
        if not self.task_categories:
            object.__setattr__(self, "task_categories", [None] * len(self.task_ids))
        if n and (self.config.min() < 0 or self.config.max() >= len(self.configs)):
            raise ValueError("TrialFrame: config index out of range")
        if n and (self.task.min() < 0 or self.task.max() >= len(self.task_ids)):
            raise ValueError("TrialFrame: task index out of range")
        if n and (self.status.min() < 0 or self.status.max() >= len(STATUSES)):
            raise ValueError("TrialFrame: status code out of range")

    def __len__(self) -> int:
        return len(self.config)

    @property
    def raw_tokens(self) -> FloatArray:
        """T_i = input (incl. cached) + output; NaN when neither is exposed
        (``TokenUsage.raw_tokens`` on columns)."""
        return _nan_sum(self.input, self.output)

    def with_costs(self, cost_usd: FloatArray) -> TrialFrame:
        return replace(self, cost_usd=np.asarray(cost_usd, dtype=np.float64))

    def with_tiers(self, tiers: dict[str, str]) -> TrialFrame:
        return replace(self, task_tiers=[tiers.get(t) for t in self.task_ids])

    def select_tasks(self, task_ids: list[str]) -> TrialFrame:
        """The frame restricted to some tasks (re-indexed in the given order)."""
        position = {t: i for i, t in enumerate(self.task_ids)}
        missing = [t for t in task_ids if t not in position]
        if missing:
            raise ValueError(f"unknown task ids: {', '.join(missing[:5])}")
        remap = np.full(len(self.task_ids), -1, dtype=np.int64)
        remap[[position[t] for t in task_ids]] = np.arange(len(task_ids))
        keep = remap[self.task] >= 0
        cols = {name: getattr(self, name)[keep] for name in ROW_COLUMNS}
        cols["task"] = remap[self.task[keep]]
        return replace(self, task_ids=list(task_ids),
                       task_tiers=[self.task_tiers[position[t]] for t in task_ids],
                       task_categories=[self.task_categories[position[t]] for t in task_ids],
                       **cols)

    def select_configs(self, config_ids: list[str]) -> TrialFrame:
        position = {c.id: i for i, c in enumerate(self.configs)}
        remap = np.full(len(self.configs), -1, dtype=np.int64)
        remap[[position[c] for c in config_ids]] = np.arange(len(config_ids))
        keep = remap[self.config] >= 0
        cols = {name: getattr(self, name)[keep] for name in ROW_COLUMNS}
        cols["config"] = remap[self.config[keep]]
        return replace(self, configs=[self.configs[position[c]] for c in config_ids], **cols)


ROW_COLUMNS = ("config", "task", "attempt", "try_order", "status", "reward", "passed", "input",
                "output", "cache_creation", "cache_read", "reasoning", "cost_usd", "turns",
                "model_calls", "tool_calls", "repeated_reads")


def _nan_sum(a: FloatArray, b: FloatArray) -> FloatArray:
    out = np.where(np.isnan(a), 0.0, a) + np.where(np.isnan(b), 0.0, b)
    out[np.isnan(a) & np.isnan(b)] = np.nan
    return out


def selected_mask(frame: TrialFrame) -> BoolArray:
    """True for the latest completed try of each (config, task, attempt)."""
    n = len(frame)
    mask = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return mask
    order = np.lexsort((np.arange(n), frame.try_order, frame.attempt, frame.task, frame.config))
    c, t, a = frame.config[order], frame.task[order], frame.attempt[order]
    last = np.ones(n, dtype=np.bool_)
    last[:-1] = (c[1:] != c[:-1]) | (t[1:] != t[:-1]) | (a[1:] != a[:-1])
    mask[order[last]] = True
    return mask


def quality(frame: TrialFrame) -> tuple[FloatArray, FloatArray]:
    """(R_i, y_i) per row. y = the recorded ``passed`` flag, else status == passed.
    R = the recorded reward, else y (binary evaluators: R = y). Non-completion without a reward
    contributes zero quality."""
    y = np.where(np.isnan(frame.passed), (frame.status == PASSED).astype(np.float64),
                 frame.passed)
    r = np.where(np.isnan(frame.reward), y, frame.reward)
    return r, y


@dataclass(frozen=True)
class CellMatrix:
    """Dense config × task view of the selected trials (one attempt per cell).

    ``state`` is MISSING / SCORED / INFRA. Quality figures are 0 outside SCORED cells; cost and
    token figures of the selected trial are NaN when unknown or missing. ``spend_*`` add up every
    completed try of *every* attempt of the (config, task), selected or not, infra_invalid ones
    included (§3.5: "Attempted runs remain part of token and cost accounting"); NaN when some
    try's cost is unknown (a total with a hole in it is not a total); tokens are NaN only when
    no try of the cell exposed any.
    """

    state: NDArray[np.int8]
    reward: FloatArray
    passed: FloatArray
    cost: FloatArray
    tokens: FloatArray
    turns: FloatArray
    interactions: FloatArray
    spend_usd: FloatArray
    spend_tokens: FloatArray
    attempt: IntArray  # chosen attempt, -1 when missing
    #: repeated file reads of the selected trial (NaN when missing or not recorded)
    repeated_reads: FloatArray
    #: ``spend_*`` of the selected attempt only (all its tries): ``--per-pass-spend selected``
    attempt_spend_usd: FloatArray
    attempt_spend_tokens: FloatArray

    @property
    def scored(self) -> BoolArray:
        return np.asarray(self.state == SCORED)


def cell_matrix(frame: TrialFrame) -> CellMatrix:
    n_c, n_t = len(frame.configs), len(frame.task_ids)
    n = len(frame)
    shape = (n_c, n_t)
    state = np.zeros(shape, dtype=np.int8)
    nan = np.full(shape, np.nan)
    out = {k: nan.copy() for k in ("cost", "tokens", "turns", "interactions", "spend_usd",
                                  "spend_tokens", "repeated_reads", "attempt_spend_usd",
                                  "attempt_spend_tokens")}
    reward, passed = np.zeros(shape), np.zeros(shape)
    chosen_attempt = np.full(shape, -1, dtype=np.int64)
    if n == 0:
        return CellMatrix(state, reward, passed, attempt=chosen_attempt, **out)
    tokens = frame.raw_tokens
    r, y = quality(frame)
    # group rows by (config, task, attempt), tries in order; sums of spending per group
    order = np.lexsort((np.arange(n), frame.try_order, frame.attempt, frame.task, frame.config))
    cta = (frame.config[order] * n_t + frame.task[order]).astype(np.int64)
    att = frame.attempt[order]
    brk = np.ones(n, dtype=np.bool_)
    brk[1:] = (cta[1:] != cta[:-1]) | (att[1:] != att[:-1])
    starts = np.flatnonzero(brk)
    ends = np.concatenate((starts[1:], [n])) - 1  # index (in order) of the selected try
    # spending: every try of every attempt of the cell
    cell_of_row = (frame.config * n_t + frame.task).astype(np.int64)
    spend_usd_cell = np.zeros(n_c * n_t)
    np.add.at(spend_usd_cell, cell_of_row, frame.cost_usd)  # NaN (unknown) propagates
    spend_tok_cell = np.zeros(n_c * n_t)
    np.add.at(spend_tok_cell, cell_of_row, np.where(np.isnan(tokens), 0.0, tokens))
    tok_known = np.zeros(n_c * n_t, dtype=np.bool_)
    tok_known[cell_of_row[~np.isnan(tokens)]] = True
    spend_tok_cell[~tok_known] = np.nan  # no try of the cell exposed a token count
    # spending of each attempt of the cell (all its tries), for the selected-attempt reading
    n_att = int(frame.attempt.max()) + 1
    key_row = cell_of_row * n_att + frame.attempt
    att_usd = np.zeros(n_c * n_t * n_att)
    np.add.at(att_usd, key_row, frame.cost_usd)
    att_tok = np.zeros(n_c * n_t * n_att)
    np.add.at(att_tok, key_row, np.where(np.isnan(tokens), 0.0, tokens))
    att_known = np.zeros(n_c * n_t * n_att, dtype=np.bool_)
    att_known[key_row[~np.isnan(tokens)]] = True
    att_tok[~att_known] = np.nan
    sel = order[ends]
    sel_cell = cta[ends]
    sel_scored = SCORED_STATUS[frame.status[sel]]
    # choose per cell: prefer scored attempts, then the latest attempt
    pick_order = np.lexsort((frame.attempt[sel], sel_scored, sel_cell))
    cells_sorted = sel_cell[pick_order]
    last = np.ones(len(pick_order), dtype=np.bool_)
    last[:-1] = cells_sorted[1:] != cells_sorted[:-1]
    g = pick_order[last]  # index into the selected-try arrays
    rows = sel[g]
    ci, ti = frame.config[rows], frame.task[rows]
    scored = sel_scored[g]
    state[ci, ti] = np.where(scored, SCORED, INFRA).astype(np.int8)
    reward[ci, ti] = np.where(scored, r[rows], 0.0)
    passed[ci, ti] = np.where(scored, y[rows], 0.0)
    out["cost"][ci, ti] = frame.cost_usd[rows]
    out["tokens"][ci, ti] = tokens[rows]
    out["turns"][ci, ti] = frame.turns[rows]
    out["repeated_reads"][ci, ti] = frame.repeated_reads[rows]
    out["interactions"][ci, ti] = frame.tool_calls[rows]
    out["spend_usd"][ci, ti] = spend_usd_cell[ci * n_t + ti]
    out["spend_tokens"][ci, ti] = spend_tok_cell[ci * n_t + ti]
    chosen_attempt[ci, ti] = frame.attempt[rows]
    att_key = (ci * n_t + ti) * n_att + frame.attempt[rows]
    out["attempt_spend_usd"][ci, ti] = att_usd[att_key]
    out["attempt_spend_tokens"][ci, ti] = att_tok[att_key]
    return CellMatrix(state, reward, passed, attempt=chosen_attempt, **out)


def tier_index(frame: TrialFrame) -> IntArray:
    """Per task: 0/1/2 for easy/medium/hard, -1 when the task has no tier."""
    lookup: dict[str, int] = {t: i for i, t in enumerate(TIERS)}
    return np.array([lookup.get(t, -1) if t is not None else -1 for t in frame.task_tiers],
                    dtype=np.int64)


def frame_from_arrays(configs: Sequence[ConfigInfo], task_ids: Sequence[str],
                      task_tiers: Sequence[str | None] | None = None, *,
                      config: ArrayLike, task: ArrayLike, status: ArrayLike,
                      attempt: ArrayLike | None = None, try_order: ArrayLike | None = None,
                      **columns: ArrayLike) -> TrialFrame:
    """Build a frame from arrays; omitted float columns are NaN (model_calls/tool_calls 0)."""
    n = len(np.asarray(config))
    cols: dict[str, FloatArray] = {}
    for name in ("reward", "passed", "input", "output", "cache_creation", "cache_read",
                 "reasoning", "cost_usd", "turns", "model_calls", "tool_calls", "repeated_reads"):
        value = columns.pop(name, None)
        default = 0.0 if name in ("model_calls", "tool_calls") else np.nan
        cols[name] = (np.full(n, default) if value is None
                      else np.asarray(value, dtype=np.float64))
    if columns:
        raise TypeError(f"unknown frame columns: {', '.join(sorted(columns))}")
    return TrialFrame(
        configs=list(configs), task_ids=list(task_ids),
        task_tiers=list(task_tiers) if task_tiers is not None else [None] * len(task_ids),
        config=np.asarray(config, dtype=np.int64), task=np.asarray(task, dtype=np.int64),
        attempt=(np.zeros(n, dtype=np.int64) if attempt is None
                 else np.asarray(attempt, dtype=np.int64)),
        try_order=(np.zeros(n, dtype=np.int64) if try_order is None
                   else np.asarray(try_order, dtype=np.int64)),
        status=np.asarray(status, dtype=np.int64),
        reward=cols["reward"], passed=cols["passed"], input=cols["input"],
        output=cols["output"], cache_creation=cols["cache_creation"],
        cache_read=cols["cache_read"], reasoning=cols["reasoning"], cost_usd=cols["cost_usd"],
        turns=cols["turns"], model_calls=cols["model_calls"], tool_calls=cols["tool_calls"],
        repeated_reads=cols["repeated_reads"])

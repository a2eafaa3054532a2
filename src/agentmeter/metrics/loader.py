"""Load a run's (or several runs') completed tries from the store into a :class:`TrialFrame`.

One SQL query per table, no per-row pydantic: status codes and tool-call totals are computed
in SQL where the backend can (SQLite's ``json_each``, PostgreSQL's ``json_each_text``), and the
columns go straight into numpy. Pending/running tries are skipped (not final); every completed
try is kept so the spending of retried infra_invalid tries stays accountable, and the selection
rule (:func:`agentmeter.metrics.frame.selected_mask`) is applied by the metrics.

With several runs, a (config, task, attempt) present in more than one run takes its latest try
from the most recently created run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa

from agentmeter.metrics.frame import STATUS_CODE, ConfigInfo, FloatArray, TrialFrame
from agentmeter.store import schema as s
from agentmeter.store.db import Store, StoreError

_USAGE = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens",
          "reasoning_tokens")
#: tries per run are numbered below this; runs are ordered above it
_RUN_STRIDE = 1 << 32
#: rows fetched and converted at a time
_CHUNK = 50_000


def _tool_calls_expr(dialect: str) -> sa.ColumnElement[Any] | None:
    if dialect == "sqlite":
        return sa.literal_column(
            "(SELECT COALESCE(SUM(value), 0) FROM json_each(trials.tool_calls))")
    if dialect == "postgresql":
        return sa.literal_column("(SELECT COALESCE(SUM(value::bigint), 0) "
                                 "FROM json_each_text(trials.tool_calls::json))")
    return None


def load_frame(store: Store, run_ids: str | Sequence[str]) -> TrialFrame:
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not ids:
        raise StoreError("load_frame: no run given")
    t = s.trials
    with store.engine.connect() as conn:
        runs = conn.execute(sa.select(s.runs.c.id, s.runs.c.created_at)
                            .where(s.runs.c.id.in_(ids))).all()
        found = {r.id for r in runs}
        missing = [r for r in ids if r not in found]
        if missing:
            raise StoreError(f"no run {', '.join(map(repr, missing))} in {store.where}")
        run_rank = {r.id: k for k, r in enumerate(sorted(runs, key=lambda r: (r.created_at,
                                                                             r.id)))}
        notes: list[str] = []
        # dimension tables: tasks (latest run's version wins) and configs
        task_rows = conn.execute(
            sa.select(s.run_tasks.c.run_id, s.tasks.c.id, s.tasks.c.tier, s.tasks.c.category)
            .join(s.tasks, sa.and_(s.tasks.c.id == s.run_tasks.c.task_id,
                                   s.tasks.c.digest == s.run_tasks.c.task_digest))
            .where(s.run_tasks.c.run_id.in_(ids))).all()
        tier: dict[str, str | None] = {}
        category: dict[str, str | None] = {}
        for row in sorted(task_rows, key=lambda r: run_rank[r.run_id]):
            if row.id in tier and tier[row.id] != row.tier:
                notes.append(f"task {row.id!r} has different tiers across runs; the latest "
                             "run's is used")
            tier[row.id], category[row.id] = row.tier, row.category
        status_case = sa.case({name: code for name, code in STATUS_CODE.items()},
                              value=t.c.status, else_=-1)
        tool_expr = _tool_calls_expr(conn.dialect.name)
        cols: list[Any] = [t.c.run_id, t.c.config_id, t.c.task_id, t.c.attempt,
                           t.c.try_number, status_case.label("code"), t.c.reward, t.c.passed,
                           *(t.c[c] for c in _USAGE), t.c.cost_usd, t.c.turns, t.c.model_calls,
                           tool_expr.label("tools") if tool_expr is not None
                           else t.c.tool_calls]
        # in chunks, straight into arrays: a million row tuples alive at once would cost
        # memory and, through the garbage collector's passes over them, most of the time.
        # Ids are coded in the order first seen, then recoded to sorted positions at the end.
        c_seen: dict[str, int] = {}
        t_seen: dict[str, int] = {}
        chunks: list[list[np.ndarray]] = []
        result = conn.execution_options(stream_results=True, yield_per=_CHUNK).execute(
            sa.select(*cols).where(t.c.run_id.in_(ids)))
        for part in result.partitions(_CHUNK):
            chunks.append(_columns(part, run_rank, c_seen, t_seen, tool_expr is None))
        config_ids = sorted(set(c_seen) | set(conn.execute(sa.select(s.run_configs.c.config_id)
                                                           .where(s.run_configs.c.run_id.in_(ids)))
                                               .scalars()))
        task_ids = sorted(set(tier) | set(t_seen))
        cfg_rows = {r.id: r for r in conn.execute(
            sa.select(s.configs).where(s.configs.c.id.in_(config_ids))).all()}
    configs = [ConfigInfo(id=c, label=cfg_rows[c].label if c in cfg_rows else c,
                          model=cfg_rows[c].model_name if c in cfg_rows else "?",
                          agent=cfg_rows[c].agent_name if c in cfg_rows else "?",
                          price_key=cfg_rows[c].model_price_key if c in cfg_rows else None)
               for c in config_ids]
    n_cols = 16
    columns: list[Any] = ([np.concatenate([ch[i] for ch in chunks]) for i in range(n_cols)] if chunks
               else [np.zeros(0, dtype=np.int64)] * 5 + [np.zeros(0)] * (n_cols - 5))
    config_col, task_col, attempt, try_order, code = columns[:5]
    config_col = _recode(c_seen, config_ids)[config_col]
    task_col = _recode(t_seen, task_ids)[task_col]
    final = code >= 0
    skipped = int((~final).sum())
    if skipped:
        notes.append(f"{skipped} unfinished try(s) (pending/running) are not scored")
    for tid in task_ids:
        tier.setdefault(tid, None)

    def f(i: int) -> FloatArray:
        return columns[i][final]  # type: ignore[no-any-return]

    return TrialFrame(
        configs=configs, task_ids=task_ids, task_tiers=[tier[t_] for t_ in task_ids],
        task_categories=[category.get(t_) for t_ in task_ids],
        config=config_col[final], task=task_col[final], attempt=attempt[final],
        try_order=try_order[final], status=code[final], reward=f(5), passed=f(6), input=f(7),
        output=f(8), cache_creation=f(9), cache_read=f(10), reasoning=f(11), cost_usd=f(12),
        turns=f(13), model_calls=f(14), tool_calls=f(15), notes=notes)


def _recode(seen: dict[str, int], ordered: list[str]) -> np.ndarray:
    """First-seen code -> position in ``ordered``."""
    pos = {x: i for i, x in enumerate(ordered)}
    return np.array([pos[x] for x in seen], dtype=np.int64)


def _columns(part: Sequence[Any], run_rank: dict[str, int], c_seen: dict[str, int],
             t_seen: dict[str, int], tools_as_json: bool) -> list[np.ndarray]:
    """One chunk of trial rows as arrays: config and task (first-seen codes, ``*_seen`` grow),
    attempt, try order, status code, then the float columns reward … model_calls and the
    tool-call total."""
    cols = list(zip(*part, strict=True))
    try_order = (np.array([run_rank[r] for r in cols[0]], dtype=np.int64) * _RUN_STRIDE
                 + np.array(cols[4], dtype=np.int64))
    if tools_as_json:
        tools = np.array([sum(json.loads(v).values()) if isinstance(v, str) else sum(v.values())
                          for v in cols[16]], dtype=np.float64)
    else:
        tools = np.array(cols[16], dtype=np.float64)
    return [np.array([c_seen.setdefault(c, len(c_seen)) for c in cols[1]], dtype=np.int64),
            np.array([t_seen.setdefault(x, len(t_seen)) for x in cols[2]], dtype=np.int64),
            np.array(cols[3], dtype=np.int64), try_order, np.array(cols[5], dtype=np.int64),
            *(np.array(cols[i], dtype=np.float64) for i in range(6, 16)), tools]

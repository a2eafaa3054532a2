"""Load a run's (or several runs') completed tries from the store into a :class:`TrialFrame`.

The store streams the trial columns in chunks (:func:`agentmeter.store.queries.trial_columns`:
status codes, try order and tool-call totals computed in SQL) and they go straight into numpy,
with no per-row pydantic. Pending/running tries are skipped (not final); every completed try is
kept so the spending of retried infra_invalid tries stays accountable, and the selection rule
(the store's try order, applied by :func:`agentmeter.metrics.frame.selected_mask`) is applied
by the metrics. Task tiers and categories are the latest run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmeter.metrics.frame import ConfigInfo, FloatArray, TrialFrame
from agentmeter.store import queries
from agentmeter.store.db import Store, StoreError

#: frame columns, in the order of ``queries.TRIAL_COLUMNS``: config, task, attempt, try order
#: and status code are integers, the rest floats
_N_COLUMNS = len(queries.TRIAL_COLUMNS)
_N_INT = 5


def load_frame(store: Store, run_ids: str | Sequence[str]) -> TrialFrame:
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not ids:
        raise StoreError("load_frame: no run given")
    runs = queries.require_runs(store, ids)
    versions = queries.run_tasks(store, runs)
    notes = [f"task {tid!r} has different tiers across runs; the latest run's is used"
             for tid in versions.tier_changes]
    # in chunks, straight into arrays: a million row tuples alive at once would cost
    # memory and, through the garbage collector's passes over them, most of the time.
    # Ids are coded in the order first seen, then recoded to sorted positions at the end.
    c_seen: dict[str, int] = {}
    t_seen: dict[str, int] = {}
    chunks = [_columns(part, c_seen, t_seen) for part in queries.trial_columns(store, runs)]
    stored = queries.run_configs(store, [r.id for r in runs], also=c_seen)
    config_ids = sorted(set(c_seen) | set(stored))
    task_ids = sorted(set(versions.tasks) | set(t_seen))
    configs = [ConfigInfo(id=c, label=stored[c].label, model=stored[c].model.name,
                          agent=stored[c].agent.name, price_key=stored[c].model.price_key)
               if c in stored else ConfigInfo(id=c, label=c, model="?", agent="?")
               for c in config_ids]
    columns: list[Any] = ([np.concatenate([ch[i] for ch in chunks]) for i in range(_N_COLUMNS)]
                          if chunks else [np.zeros(0, dtype=np.int64)] * _N_INT
                          + [np.zeros(0)] * (_N_COLUMNS - _N_INT))
    config_col, task_col, attempt, try_order, code = columns[:_N_INT]
    config_col = _recode(c_seen, config_ids)[config_col]
    task_col = _recode(t_seen, task_ids)[task_col]
    final = code >= 0
    skipped = int((~final).sum())
    if skipped:
        notes.append(f"{skipped} unfinished try(s) (pending/running) are not scored")
    tasks = versions.tasks

    def f(i: int) -> FloatArray:
        return columns[i][final]  # type: ignore[no-any-return]

    return TrialFrame(
        configs=configs, task_ids=task_ids,
        task_tiers=[tasks[t].tier if t in tasks else None for t in task_ids],
        task_categories=[tasks[t].category if t in tasks else None for t in task_ids],
        config=config_col[final], task=task_col[final], attempt=attempt[final],
        try_order=try_order[final], status=code[final], reward=f(5), passed=f(6), input=f(7),
        output=f(8), cache_creation=f(9), cache_read=f(10), reasoning=f(11), cost_usd=f(12),
        turns=f(13), model_calls=f(14), tool_calls=f(15), repeated_reads=f(16), notes=notes)


def _recode(seen: dict[str, int], ordered: list[str]) -> np.ndarray:
    """First-seen code -> position in ``ordered``."""
    pos = {x: i for i, x in enumerate(ordered)}
    return np.array([pos[x] for x in seen], dtype=np.int64)


def _columns(part: Sequence[Any], c_seen: dict[str, int], t_seen: dict[str, int]
             ) -> list[np.ndarray]:
    """One chunk of trial rows as arrays: config and task (first-seen codes, ``*_seen`` grow),
    attempt, try order, status code, then the float columns reward … tool calls."""
    cols = list(zip(*part, strict=True))
    return [np.array([c_seen.setdefault(c, len(c_seen)) for c in cols[0]], dtype=np.int64),
            np.array([t_seen.setdefault(x, len(t_seen)) for x in cols[1]], dtype=np.int64),
            *(np.array(cols[i], dtype=np.int64) for i in range(2, _N_INT)),
            *(np.array(cols[i], dtype=np.float64) for i in range(_N_INT, _N_COLUMNS))]

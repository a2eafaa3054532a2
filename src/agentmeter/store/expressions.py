"""The read rules as SQL expressions, for SQLite and PostgreSQL; the store's read modules
(:mod:`~agentmeter.store.queries`, :mod:`~agentmeter.store.browse`) build every query from these,
so each rule is written once.

- **final statuses**: a try counts once it has a final status (``records.FINAL_STATUSES``);
  metrics code them by position (:func:`status_code`), pending/running are -1.
- **raw tokens** T = input + output, unknown (NULL) when neither is exposed
  (``TokenUsage.raw_tokens`` for records).
- **tool calls**: a trial's ``tool_calls`` is a JSON object name -> count; :func:`json_entries`
  expands it (SQLite ``json_each``, PostgreSQL ``json_each_text``), :func:`tool_calls_total`
  sums it per row.
- **the scripted model**: a model name starting with one of ``records.SCRIPTED_PREFIXES``.
- **try order** (the selection rule's order): the tries of one (config, task, attempt) are
  ordered by their run's creation, then by try number; the selected try is the completed one
  that comes last (:func:`try_order`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from agentmeter.records import FINAL_STATUSES, SCRIPTED_PREFIXES, TrialStatus
from agentmeter.store import schema as s

#: status values of finished tries, in metric-code order
FINAL = [st.value for st in FINAL_STATUSES]
#: status values of tries still pending or running
NOT_FINAL = [st.value for st in TrialStatus if not st.final]
#: tries of one run are numbered below this in :func:`try_order`; runs are ordered above it
TRY_STRIDE = 1 << 32


def is_final(status: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    return status.in_(FINAL)


def status_code(status: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    """The status's position in ``FINAL_STATUSES``; -1 for a try still pending or running."""
    return sa.case({name: code for code, name in enumerate(FINAL)}, value=status, else_=-1)


def raw_tokens(table: sa.Table) -> sa.ColumnElement[Any]:
    """Input (incl. cached) + output tokens of a trials or model_calls row; NULL when neither
    is exposed (nothing unknown counts as zero)."""
    c = table.c
    return sa.case((sa.and_(c.input_tokens.is_(None), c.output_tokens.is_(None)), None),
                   else_=sa.func.coalesce(c.input_tokens, 0) + sa.func.coalesce(c.output_tokens, 0))


def json_entries(dialect: str, column: str, alias: str) -> tuple[str, str]:
    """(FROM item, numeric value) expanding the JSON object in ``column`` (SQL text, e.g.
    ``t.tool_calls``) into rows ``alias.key`` / ``alias.value``. Join the FROM item with
    ``CROSS JOIN``: both SQLite's table-valued functions and PostgreSQL's set-returning
    functions may refer to the tables on their left."""
    if dialect == "postgresql":
        return f"json_each_text({column}::json) AS {alias}", f"{alias}.value::bigint"
    return f"json_each({column}) AS {alias}", f"{alias}.value"


def tool_calls_total(dialect: str) -> sa.ColumnElement[Any]:
    """Tool invocations of a trials row (the sum over its ``tool_calls`` object), 0 for none."""
    each, value = json_entries(dialect, f"{s.trials.name}.tool_calls", "tc")
    return sa.literal_column(f"(SELECT COALESCE(SUM({value}), 0) FROM {each})")


def is_scripted_model(model_name: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """``records.is_scripted`` in SQL."""
    return sa.or_(*(model_name.startswith(p) for p in SCRIPTED_PREFIXES))


def try_order(run_ids: Sequence[str]) -> sa.ColumnElement[Any]:
    """An integer ordering the tries of one (config, task, attempt) across ``run_ids`` (given
    oldest run first): the run's position, then the try number. Later tries order higher; the
    selection rule takes the completed try with the highest order."""
    t = s.trials
    rank = sa.case({rid: sa.literal_column(str(k)) for k, rid in enumerate(run_ids)},
                   value=t.c.run_id, else_=sa.literal_column("0"))
    return rank * sa.literal_column(str(TRY_STRIDE)) + t.c.try_number

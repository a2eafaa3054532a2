"""Generic per-trial tables (CSV, JSON Lines, Parquet) with a column mapping
(:mod:`agentmeter.importers.mapping`). One row = one trial try. Every bad value is reported as
``FILE: row N, column C: what is wrong`` and nothing is written.

CLI-Tool-Bench funnel columns (build, exec, em, fm, sm, sp: repository scores) become the named
rewards ``build`` and ``all.<level>`` (:data:`~agentmeter.importers.mapping.FUNNEL_REWARDS`), so
``agentmeter score --metric funnel`` scores an imported table."""

from __future__ import annotations

import csv
import importlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentmeter.importers.common import (
    ImportedRun,
    ImportFormatError,
    TrialDraft,
    build_run,
    parse_time,
    safe_run_id,
    status_from_reward,
)
from agentmeter.importers.mapping import FIELDS, FUNNEL_REWARDS, Mapping
from agentmeter.records import USAGE_COLUMNS, PhaseTimings, TokenUsage, TrialStatus

TABLE_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_NULLS = {"", "n/a", "na", "nan", "null", "none"}


def require_pyarrow() -> Any:
    """``pyarrow.parquet`` (an optional dependency, imported by name so typing needs no stubs)."""
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ImportFormatError("Parquet needs pyarrow, which is not installed: "
                                "pip install pyarrow (or use CSV / JSON Lines)") from None
    return pq


def table_kind(path: Path) -> str:
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ImportFormatError(f"{path}: a table must end in .csv, .jsonl or .parquet")
    return kind


def read_rows(path: Path) -> tuple[list[str], Iterator[tuple[int, dict[str, Any]]]]:
    """(column names, iterator of (row number, row)). Row numbers: CSV data rows count from 1
    after the header, JSONL rows are line numbers, Parquet rows count from 1."""
    kind = table_kind(path)
    try:
        if kind == "csv":
            f = path.open(newline="", encoding="utf-8-sig")
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            if not header:
                raise ImportFormatError(f"{path}: empty CSV (no header row)")

            def csv_rows() -> Iterator[tuple[int, dict[str, Any]]]:
                with f:
                    for n, row in enumerate(reader, start=1):
                        if None in row:
                            raise ImportFormatError(f"{path}: row {n}: more cells than the "
                                                    f"{len(header)} header columns")
                        yield n, dict(row)
            return header, csv_rows()
        if kind == "jsonl":
            rows: list[tuple[int, dict[str, Any]]] = []
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ImportFormatError(f"{path}: row {n}: not JSON: {e.msg}") from None
                except RecursionError:
                    raise ImportFormatError(f"{path}: row {n}: JSON nested too deep") from None
                if not isinstance(obj, dict):
                    raise ImportFormatError(f"{path}: row {n}: expected a JSON object")
                rows.append((n, obj))
            cols = sorted({k for _, r in rows for k in r})
            return cols, iter(rows)
        pq = require_pyarrow()
        table = pq.read_table(path)
        return list(table.column_names), enumerate(table.to_pylist(), start=1)
    except (OSError, UnicodeDecodeError) as e:
        raise ImportFormatError(f"{path}: cannot read: {e}") from None


class _Row:
    def __init__(self, path: Path, n: int, row: dict[str, Any], mapping: Mapping,
                 columns: set[str]) -> None:
        self.path, self.n, self.row, self.mapping, self.columns = path, n, row, mapping, columns

    def where(self, col: str | None = None) -> str:
        return f"{self.path}: row {self.n}" + (f", column {col!r}" if col else "")

    def fail(self, col: str | None, msg: str) -> ImportFormatError:
        return ImportFormatError(f"{self.where(col)}: {msg}")

    def raw(self, field: str) -> tuple[str | None, Any]:
        col = self.mapping.column(field, self.columns)
        if col is not None:
            value = self.row.get(col)
            if not (value is None or (isinstance(value, str) and value.strip().lower() in _NULLS)
                    or (isinstance(value, float) and math.isnan(value))):
                return col, value
        return None, self.mapping.defaults.get(field)

    def text(self, field: str) -> str | None:
        _, v = self.raw(field)
        return None if v is None else str(v).strip()

    def integer(self, field: str) -> int | None:
        col, v = self.raw(field)
        if v is None:
            return None
        f = _as_float(v)
        if not math.isfinite(f) or f != int(f) or f < 0:
            raise self.fail(col or field, f"expected a whole number >= 0, got {v!r}")
        return int(f)

    def number(self, field: str) -> float | None:
        col, v = self.raw(field)
        if v is None:
            return None
        f = _as_float(v)
        if not math.isfinite(f) or f < 0:
            raise self.fail(col or field, f"expected a number >= 0, got {v!r}")
        if (field == "reward" or field in FUNNEL_REWARDS) and f > 1:
            raise self.fail(col or field, f"{field} must be in [0, 1], got {v!r}")
        if field == "build" and f not in (0.0, 1.0):
            raise self.fail(col or field, f"build must be 0 or 1, got {v!r}")
        return f

    def boolean(self, field: str) -> bool | None:
        col, v = self.raw(field)
        if v is None or isinstance(v, bool):
            return v
        text = str(v).strip().lower()
        if text in ("true", "1", "yes", "y", "t", "1.0"):
            return True
        if text in ("false", "0", "no", "n", "f", "0.0"):
            return False
        raise self.fail(col or field, f"expected true/false, got {v!r}")

    def status(self) -> TrialStatus | None:
        col, v = self.raw("status")
        if v is None:
            return None
        name = self.mapping.status_value(str(v))
        if name is None:
            raise self.fail(col or "status", f"unknown status {v!r}: use one of passed, failed, "
                            "agent_error, timeout, budget_exceeded, infra_invalid, or map it "
                            "in [status_values] of a mapping file")
        return TrialStatus(name)

    def time(self, field: str) -> Any:
        col, v = self.raw(field)
        try:
            return parse_time(v, self.where(col or field))
        except ImportFormatError as e:
            raise e from None


def _draft(r: _Row) -> TrialDraft:
    task = r.text("task")
    if not task:
        raise r.fail(r.mapping.column("task", r.columns) or "task",
                     "no task id (map the task column in [columns] of a mapping file)")
    label, model, agent = r.text("config"), r.text("model"), r.text("agent")
    if not (label or model or agent):
        raise r.fail(None, "no configuration: the row has no config, model or agent value")
    passed = r.boolean("passed")
    reward = r.number("reward")
    status = r.status()
    funnel = {key: v for field, key in FUNNEL_REWARDS.items()
              if (v := r.number(field)) is not None}
    if reward is None and "all.sm" in funnel:
        reward = funnel["all.sm"]  # a CLI-generation task's reward is its SM
    if passed is None and status is None and reward is not None:
        passed = reward >= r.mapping.pass_threshold
    if status is None:
        if passed is None:
            raise r.fail(None, "no status, passed or reward: cannot tell the outcome")
        status = status_from_reward(passed, None)
    elif passed is None and status is not TrialStatus.INFRA_INVALID:
        passed = status is TrialStatus.PASSED
    if status is TrialStatus.PASSED and passed is False:
        raise r.fail(r.mapping.column("passed", r.columns), "status is passed but passed is false")
    tier = r.text("tier") or r.mapping.tiers.get(task)
    tools = r.integer("tool_calls")
    return TrialDraft(
        where=r.where(), task=task, agent=agent or label or "unknown", model=model or "unknown",
        status=status, agent_version=r.text("agent_version"), config_id=r.text("config_id"),
        price_key=r.text("price_key") or (model if model and "/" in model else None),
        label=label, tier=tier, category=r.text("category"), attempt=r.integer("attempt"),
        try_number=r.integer("try_number") or 0, reward=reward, rewards=funnel, passed=passed,
        error=r.text("error"),
        usage=TokenUsage(**{name: r.integer(col) for name, col in USAGE_COLUMNS.items()}),
        cost_usd=r.number("cost_usd"), model_calls=r.integer("model_calls") or 0,
        tool_calls={"total": tools} if tools else {}, turns=r.integer("turns"),
        started_at=r.time("started_at"), finished_at=r.time("finished_at"),
        timings=PhaseTimings(environment=r.number("environment_s"),
                             agent_setup=r.number("agent_setup_s"),
                             agent_run=r.number("agent_run_s"),
                             verification=r.number("verification_s")))


def import_table(path: Path, mapping: Mapping | None = None,
                 run_id: str | None = None) -> ImportedRun:
    mapping = mapping or Mapping()
    header, rows = read_rows(path)
    columns = set(header)
    missing = sorted({c for f, c in mapping.columns.items() if c and c not in columns})
    if missing:
        raise ImportFormatError(f"{mapping.path or 'mapping'}: column(s) {', '.join(missing)} "
                                f"not in {path} (its columns: {', '.join(header)})")
    if mapping.column("task", columns) is None:
        raise ImportFormatError(f"{path}: no 'task' column; map one in [columns] of a mapping "
                                f"file (its columns: {', '.join(header)})")
    drafts = [_draft(_Row(path, n, row, mapping, columns)) for n, row in rows]
    source = mapping.source or "table"
    return build_run(drafts, run_id=run_id or safe_run_id(f"import-{path.stem}"),
                     source=source, origin=path,
                     settings={"format": "table", "mapping": mapping.path,
                               "fields": [f for f in FIELDS if mapping.column(f, columns)]})


def _as_float(v: object) -> float:
    """A cell as a float; NaN for booleans and anything that is not a number."""
    if isinstance(v, bool):
        return math.nan
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan

"""Trial listing and per-trial drill-down data, shared by the HTML report (every trial, fetched
in bulk) and the viewer (one page or one trial at a time, LIMIT/OFFSET in SQL); the reads are
:mod:`agentmeter.store.browse`'s.

Rows and details are plain JSON-able lists/dicts: the report embeds them and the viewer serves
them, and the same inline JavaScript renders both.
"""

from __future__ import annotations

import base64
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agentmeter.records import USAGE_COLUMNS
from agentmeter.report.html import agency, difftest
from agentmeter.store import browse
from agentmeter.store.artifacts import artifact_file
from agentmeter.store.browse import ArtifactRow, CallRow, TrialDetail, TrialQuery, TrialRow
from agentmeter.store.db import Store

#: columns of a trial row as sent to the page (``ROW_COLUMNS[i]`` names ``row[i]``)
ROW_COLUMNS = ("run", "id", "try", "config", "task", "attempt", "status", "reward", "tokens",
               "cost", "calls", "tools", "seconds", "error")
CALL_COLUMNS = ("seq", "model", "api", "status", "latency_s", "ttft_s", *USAGE_COLUMNS, "cost",
                "error", "scripted", "purpose")
TEXT_KINDS = ("verifier_output", "fs_diff", "agent_log", "transcript", "other")
TEXT_SUFFIXES = (".txt", ".log", ".json", ".jsonl", ".md", ".diff", ".patch", ".out", ".err",
                 ".yaml", ".yml", ".toml", ".csv", ".py", ".sh", "")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg")
VIDEO_SUFFIXES = (".mp4", ".webm", ".ogv", ".mov")
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}  # no SVG inline: it can carry script
ArtifactLink = Callable[[str, str, int, str, Path], str]
#: artifacts shown in their own section of the drill-down, not embedded as text again
LINK_ONLY = {difftest.CASES_ARTIFACT: "differential test"}


@dataclass
class TextBudget:
    """Characters of artifact text still allowed in the output (the report's size bound)."""

    remaining: int
    per_artifact: int = 4000
    #: largest image (bytes) embedded as a data URI, within ``remaining``; 0: link only
    embed_image_bytes: int = 0
    #: a differential test's drill-down: characters of one case output stream, of one trial
    difftest_stream: int = 4000
    difftest_trial: int = 1_000_000

    def take(self, wanted: int) -> int:
        n = max(0, min(wanted, self.per_artifact, self.remaining))
        self.remaining -= n
        return n


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return round((end - start).total_seconds(), 2) if start and end else None


def _row(r: TrialRow) -> list[Any]:
    err = r.error.strip().splitlines()[0][:160] if r.error and r.error.strip() else None
    return [r.run_id, r.id, r.try_number, r.config_id, r.task_id, r.attempt, r.status, r.reward,
            r.tokens, r.cost_usd, r.model_calls, r.tool_calls,
            _seconds(r.started_at, r.finished_at), err]


def trial_page(store: Store, run_ids: Sequence[str], query: TrialQuery, offset: int,
               limit: int) -> tuple[int, list[list[Any]]]:
    """(matching tries, one page of rows): every try of every trial, filtered and sorted in SQL."""
    total, rows = browse.trial_page(store, run_ids, query, offset, limit)
    return total, [_row(r) for r in rows]


# --- drill-down ----------------------------------------------------------------------------


def _call(r: CallRow) -> list[Any]:
    api = r.client_api if r.client_api == r.wire_api else f"{r.client_api}→{r.wire_api}"
    return [r.seq, r.upstream_model, api, r.status_code, round(r.latency_s, 3),
            None if r.ttft_s is None else round(r.ttft_s, 3), *r.usage.values(), r.cost_usd,
            (r.error or "")[:300] or None, r.scripted, r.purpose]


def _read_text(path: Path, size: int, budget: TextBudget) -> tuple[str | None, bool]:
    """(text, truncated): head and tail of a text file within the budget."""
    allowed = budget.take(size)
    if allowed <= 0:
        return None, size > 0
    with path.open("rb") as fh:
        if size <= allowed:
            data = fh.read(allowed).decode("utf-8", "replace")
            return data, False
        head = fh.read(allowed * 2 // 3).decode("utf-8", "replace")
        tail_n = allowed - allowed * 2 // 3
        fh.seek(max(size - tail_n, 0))
        tail = fh.read(tail_n).decode("utf-8", "replace")
    return f"{head}\n… [{size - allowed:,} bytes omitted] …\n{tail}", True


def _is_text(name: str, kind: str) -> bool:
    suffix = Path(name).suffix.lower()
    return kind in TEXT_KINDS and (kind != "other" or suffix in TEXT_SUFFIXES)


def artifact_entries(rows: Sequence[ArtifactRow], run_dir: Path | None, run_id: str, trial_id: str,
                     try_number: int, budget: TextBudget, link: ArtifactLink
                     ) -> list[dict[str, Any]]:
    """Artifacts of one try: text ones embedded (truncated), small images embedded when the
    budget allows, images and videos shown from their link, the rest linked."""
    order = {k: i for i, k in enumerate(TEXT_KINDS)}
    out = []
    for r in sorted(rows, key=lambda r: (order.get(r.kind, 99), r.name)):
        entry: dict[str, Any] = {"name": r.name, "kind": r.kind, "size": r.size}
        path = artifact_file(run_dir, r.relpath) if run_dir is not None else None
        try:
            st = path.stat() if path is not None else None
        except OSError:
            st = None
        if path is None or st is None or not stat.S_ISREG(st.st_mode):
            entry["missing"] = True
        else:
            entry["href"] = link(run_id, trial_id, try_number, r.name, path)
            suffix = Path(r.name).suffix.lower()
            media = ("image" if r.kind == "screenshot" or suffix in IMAGE_SUFFIXES
                     else "video" if r.kind == "video" or suffix in VIDEO_SUFFIXES else None)
            if media is not None:
                entry["media"] = media
                data = _image_data(path, st.st_size, suffix, budget) if media == "image" else None
                if data is not None:
                    entry["data"] = data
            elif r.name in LINK_ONLY:
                entry["shown"] = LINK_ONLY[r.name]
            elif _is_text(r.name, r.kind):
                entry["text"], entry["truncated"] = _read_text(path, st.st_size, budget)
        out.append(entry)
    return out


def _image_data(path: Path, size: int, suffix: str, budget: TextBudget) -> str | None:
    """A small raster image as a data URI, when the budget allows (the report stays one file
    that shows its screenshots offline)."""
    kind = _IMAGE_TYPES.get(suffix)
    encoded = (size + 2) // 3 * 4 + 32
    if kind is None or size > budget.embed_image_bytes or encoded > budget.remaining:
        return None
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    budget.remaining -= encoded
    return f"data:{kind};base64," + base64.b64encode(raw).decode()


def difftest_html(d: TrialDetail, run_dir: Path | None, budget: TextBudget) -> str | None:
    """The differential-test drill-down of a CLI-generation trial (None for other trials),
    its embedded text within ``budget``."""
    names = {a.name: a for a in d.artifacts}
    if not difftest.is_difftest(d.rewards, d.extra, set(names)):
        return None

    def path(name: str) -> Path | None:
        a = names.get(name)
        if a is None or run_dir is None:
            return None
        p = artifact_file(run_dir, a.relpath)
        return p if p is not None and p.is_file() else None

    allowed = difftest.Budget(remaining=max(0, min(budget.remaining, budget.difftest_trial)),
                              per_stream=budget.difftest_stream)
    html = difftest.render(d.rewards, d.extra, path(difftest.CASES_ARTIFACT),
                           path(difftest.CLASSES_ARTIFACT),
                           has_cases_artifact=difftest.CASES_ARTIFACT in names, budget=allowed,
                           ident={"run": d.row.run_id, "trial": d.row.id,
                                  "try": d.row.try_number})
    budget.remaining = max(0, budget.remaining - len(html))
    return html


def agency_html(d: TrialDetail, entries: list[dict[str, Any]], run_dir: Path | None,
                budget: TextBudget) -> str | None:
    """A scenario step's rounds, rubric, media and judge cost (None for other trials); its
    media entries are marked shown there."""
    embedded = sum(len(e.get("data", "")) for e in entries)  # already paid for; moved there
    html = agency.drill(d.extra, d.row.reward, d.artifacts, entries, run_dir)
    if html is not None:
        moved = embedded - sum(len(e.get("data", "")) for e in entries)
        budget.remaining = max(0, budget.remaining - (len(html) - moved))
    return html


def _detail(d: TrialDetail, artifacts: list[dict[str, Any]], max_calls: int,
            difftest_view: str | None = None, agency_view: str | None = None
            ) -> dict[str, Any]:
    r = d.row
    return {
        "run": r.run_id, "id": r.id, "try": r.try_number, "config": r.config_id,
        "task": r.task_id, "attempt": r.attempt, "status": r.status, "reward": r.reward,
        "rewards": d.rewards, "passed": d.passed, "error": (r.error or "")[:4000] or None,
        "usage": d.usage, "cost": r.cost_usd, "model_calls": r.model_calls, "turns": d.turns,
        "tool_calls": d.tool_calls, "timings": d.timings,
        "started": r.started_at.isoformat() if r.started_at else None,
        "finished": r.finished_at.isoformat() if r.finished_at else None,
        "calls": [_call(c) for c in d.calls[:max_calls]],
        "calls_omitted": max(0, len(d.calls) - max_calls),
        "artifacts": artifacts,
        "difftest": difftest_view,
        "agency": agency_view,
    }


def trial_detail(store: Store, run_id: str, trial_id: str, try_number: int | None,
                 link: ArtifactLink, budget: TextBudget | None = None,
                 max_calls: int = 2000) -> dict[str, Any] | None:
    """One try (the latest when ``try_number`` is None) with calls and artifacts."""
    d = browse.trial_detail(store, run_id, trial_id, try_number)
    if d is None:
        return None
    run_dir = store.run_dir(run_id) if store.runs_dir is not None else None
    budget = budget or TextBudget(2_000_000, 60_000)
    # the drill-down's own allowance: one trial's cases, apart from its artifacts' text
    own = TextBudget(remaining=budget.difftest_trial, per_artifact=0,
                     difftest_stream=budget.difftest_stream, difftest_trial=budget.difftest_trial)
    view = difftest_html(d, run_dir, own)
    entries = artifact_entries(d.artifacts, run_dir, run_id, trial_id, d.row.try_number,
                               budget, link)
    return _detail(d, entries, max_calls, view, agency_html(d, entries, run_dir, budget))


def all_trials(store: Store, run_ids: Sequence[str], link: ArtifactLink, budget: TextBudget,
               max_calls: int = 200) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Every try of the runs as rows plus a parallel list of details."""
    ids = list(run_ids)
    trials = browse.all_trial_details(store, ids)
    run_dirs = {rid: store.run_dir(rid) if store.runs_dir is not None else None for rid in ids}
    # failed tries first get their verifier output embedded when the budget is tight
    priority = sorted(range(len(trials)), key=lambda i: trials[i].row.status == "passed")
    entries: dict[int, list[dict[str, Any]]] = {}
    views: dict[int, str | None] = {}
    agency_views: dict[int, str | None] = {}
    for i in priority:
        r = trials[i].row
        views[i] = difftest_html(trials[i], run_dirs[r.run_id], budget)
        entries[i] = artifact_entries(trials[i].artifacts, run_dirs[r.run_id], r.run_id, r.id,
                                      r.try_number, budget, link)
        agency_views[i] = agency_html(trials[i], entries[i], run_dirs[r.run_id], budget)
    rows = [_row(d.row) for d in trials]
    details = [_detail(d, entries[i], max_calls, views[i], agency_views[i])
               for i, d in enumerate(trials)]
    return rows, details

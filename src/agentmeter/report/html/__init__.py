"""The self-contained HTML report: one file, works offline (inline CSS, inline SVG charts,
inline JS, every trial embedded for drill-down). Reads only from the store.

>>> write_html_report(store, ["run-1"], Path("report.html"))
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from agentmeter.metrics import ScoringSpec
from agentmeter.report.html.collect import ReportData, collect
from agentmeter.report.html.page import pack, render_page
from agentmeter.report.html.trials import (
    IMAGE_SUFFIXES,
    VIDEO_SUFFIXES,
    ArtifactLink,
    TextBudget,
    all_trials,
)
from agentmeter.store.artifacts import safe_trial_name
from agentmeter.store.db import Store

#: characters of artifact text embedded in one report (keeps the file small on big runs)
TEXT_BUDGET = 6_000_000
PER_ARTIFACT = 3000
#: screenshots up to this size are embedded (they count against TEXT_BUDGET)
EMBED_IMAGE_BYTES = 256_000
#: a CLI-generation trial's differential test: characters of one case's output stream and of
#: one trial's cases (failing tries and failing cases take the budget first)
DIFFTEST_STREAM = 1500
DIFFTEST_TRIAL = 600_000

__all__ = ["ReportData", "collect", "render_report_html", "media_dir_of", "report_title",
           "write_html_report"]


def report_title(run_ids: Sequence[str]) -> str:
    ids = list(run_ids)
    shown = ", ".join(ids[:3]) + (f" (+{len(ids) - 3} more)" if len(ids) > 3 else "")
    return f"agentmeter report — {shown}"


def _file_links(base: Path | None, media_dir: Path | None = None) -> ArtifactLink:
    """Links from the report to artifact files: relative to the report's directory (they keep
    working when the report is copied along with the runs directory), absolute otherwise.
    With ``media_dir`` (beside the report) images and videos are copied there (hard-linked when
    the file system allows) and linked there, so the report moves with that one directory."""

    def link(run_id: str, trial_id: str, try_number: int, name: str, path: Path) -> str:
        target = path if path.is_absolute() else path.absolute()
        if media_dir is not None and base is not None and _is_media(name):
            # safe_trial_name: a hash of the id when it was changed (a_b:c and a:b_c differ)
            copy = (media_dir / _safe(run_id) / safe_trial_name(trial_id, try_number)
                    / _safe_rel(name))
            if _place(target, copy):
                return quote(os.path.relpath(copy, base))
        if base is None:
            return target.as_uri()
        return quote(os.path.relpath(target, base))

    return link


def _is_media(name: str) -> bool:
    return Path(name).suffix.lower() in (*IMAGE_SUFFIXES, *VIDEO_SUFFIXES)


def _safe(part: str) -> str:
    """One path component from a stored name (no separator, no dot-only name)."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in part).strip(".")
    return cleaned or "_"


def _safe_rel(name: str) -> Path:
    parts = [_safe(p) for p in name.split("/") if p not in ("", ".", "..")]
    return Path(*parts) if parts else Path("_")


def _place(source: Path, copy: Path) -> bool:
    """``source`` at ``copy``: a hard link, else a copy; False when neither works or when
    ``source`` is a symbolic link (only the stored file itself is placed)."""
    try:
        if source.is_symlink() or not source.is_file():
            return False
        copy.parent.mkdir(parents=True, exist_ok=True)
        if copy.exists():
            if copy.stat().st_size == source.stat().st_size:
                return True
            copy.unlink()
        try:
            os.link(source, copy)
        except OSError:
            shutil.copy2(source, copy)
    except OSError:
        return False
    return True


def media_dir_of(report: Path) -> Path:
    """Where a report's images and videos are copied: ``<report stem>_media`` beside it."""
    return report.parent / f"{report.stem}_media"


def render_report_html(store: Store, run_ids: Sequence[str], spec: ScoringSpec | None = None,
                       *, text_budget: int = TEXT_BUDGET, link_base: Path | None = None,
                       media_dir: Path | None = None) -> str:
    """The report page; artifact links are relative to ``link_base`` (the report's directory)
    when given, images and videos copied to ``media_dir`` (beside it) when given. Small
    screenshots are embedded within ``text_budget``."""
    data = collect(store, run_ids, spec)
    budget = TextBudget(remaining=text_budget, per_artifact=PER_ARTIFACT,
                        embed_image_bytes=EMBED_IMAGE_BYTES, difftest_stream=DIFFTEST_STREAM,
                        difftest_trial=DIFFTEST_TRIAL)
    rows, details = all_trials(store, data.run_ids, _file_links(link_base, media_dir),
                                budget)
    payload = pack({"rows": rows, "details": details})
    return render_page(data, report_title(data.run_ids), trials_payload=payload)


def write_html_report(store: Store, run_ids: Sequence[str], path: Path | str,
                      spec: ScoringSpec | None = None) -> Path:
    """Write the report for ``run_ids`` to ``path`` atomically and return its absolute path.
    Its images and videos are copied beside it (``media_dir_of``): moved together with that
    directory, the report still shows them."""
    target = Path(path).expanduser().resolve()
    html = render_report_html(store, run_ids, spec, link_base=target.parent,
                              media_dir=media_dir_of(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    target.chmod(0o644)
    return target

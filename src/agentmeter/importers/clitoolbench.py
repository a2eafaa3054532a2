"""CLI-Tool-Bench's released results, ``results_metadata_with_sp.json``: a JSON array with one
row per (repository, model, framework), as published beside the paper (spec
clitoolbench.md §6.4, §6.6).

Per row one trial (attempt 0): configuration = agent (``framework``: OpenHands → openhands,
Mini-SWE-Agent → mini-swe-agent) × model (``model_name``); task = ``instance_id``. The
repository scores become named rewards of one pseudo command class ``all`` — ``build``,
``all.exec``, ``all.em``, ``all.fm``, ``all.sm`` and ``all.side_effects`` = ``sp`` when it was
computed — so the funnel's macro average over classes is the published value and
``agentmeter score --metric funnel`` reproduces the leaderboard's per-configuration means.
``reward`` = ``sm``; passed = sm ≥ the mapping's ``pass_threshold`` (default 1.0).
Usage: prompt/completion tokens, ``cost`` (USD), ``steps`` → turns; the timing and structure
fields go to the trial's ``extra``. Tasks: tier from ``oracle_loc`` (easy ≤ 1500 < medium
< 4000 ≤ hard), domain from an optional ``category.json``, tag ``language:<language>``.

The six repositories the publisher excluded are left out unless ``include_excluded``. A bad row
is reported as ``FILE: row N (instance_id), field F: …`` and nothing is written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentmeter.importers.common import (
    ImportedRun,
    ImportFormatError,
    TrialDraft,
    build_run,
    safe_run_id,
)
from agentmeter.importers.mapping import Mapping
from agentmeter.records import TokenUsage, TrialStatus

#: the publisher's excluded_repos.py: in full_name.txt, not in the released benchmark
EXCLUDED_REPOS = frozenset({
    "VictorFrancelino/simplescript", "LucasBringsken/whattheflag", "Osc2405/pbi-docs",
    "Matricess/depcycle", "CMIP-Data-Request/CMIP7_DReq_Software", "ChrisChinchilla/Vale-MCP"})
#: released framework names -> agentmeter agent names (others: lower case, spaces as '-')
FRAMEWORKS = {"OpenHands": "openhands", "Mini-SWE-Agent": "mini-swe-agent"}
#: the difficulty tiers by oracle lines of code (paper Table 1; ties as spec §1.3 proposes)
EASY_MAX_LOC, HARD_MIN_LOC = 1500, 4000
SCORES = ("exec", "em", "fm", "sm")
COUNTS = ("loc", "files", "directories", "depth", "oracle_loc", "oracle_files",
          "oracle_directories", "oracle_depth")
TIME_NA = "Time N/A"


def looks_like_clitoolbench(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".json" and \
        path.name.startswith("results_metadata")


def tier_of(oracle_loc: int) -> str:
    if oracle_loc <= EASY_MAX_LOC:
        return "easy"
    return "hard" if oracle_loc >= HARD_MIN_LOC else "medium"


def _load(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ImportFormatError(f"{path}: cannot read {what}: {e}") from None
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    except RecursionError:
        raise ImportFormatError(f"{path}: JSON nested too deep to read") from None


def read_categories(path: Path) -> dict[str, str]:
    """``category.json`` ({domain: [owner/repo, …]}) as repo -> domain."""
    data = _load(path, "the categories")
    if not isinstance(data, dict):
        raise ImportFormatError(f"{path}: expected an object {{domain: [owner/repo, ...]}}")
    domains: dict[str, str] = {}
    for domain, repos in data.items():
        if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
            raise ImportFormatError(f"{path}: field {domain!r}: expected a list of owner/repo")
        for repo in repos:
            if domains.get(repo, domain) != domain:
                raise ImportFormatError(f"{path}: {repo} is in both {domains[repo]!r} and "
                                        f"{domain!r}")
            domains[repo] = domain
    return domains


class _Row:
    def __init__(self, path: Path, n: int, row: dict[str, Any]) -> None:
        self.row = row
        iid = row.get("instance_id")
        self.where = f"{path}: row {n}" + (f" ({iid})" if isinstance(iid, str) else "")

    def fail(self, name: str, msg: str) -> ImportFormatError:
        return ImportFormatError(f"{self.where}, field {name}: {msg}")

    def text(self, name: str) -> str:
        v = self.row.get(name)
        if not isinstance(v, str) or not v.strip():
            raise self.fail(name, f"expected a non-empty string, got {v!r}")
        return v.strip()

    def number(self, name: str, required: bool = False, top: float | None = None
               ) -> float | None:
        v = self.row.get(name)
        if v is None and not required:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                or v < 0 or (top is not None and v > top):
            bound = f"in [0, {top:g}]" if top is not None else ">= 0"
            raise self.fail(name, f"expected a number {bound}, got {v!r}")
        return float(v)

    def count(self, name: str) -> int | None:
        v = self.row.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != int(v):
            raise self.fail(name, f"expected a whole number >= 0, got {v!r}")
        return int(v)

    def seconds(self, name: str) -> float | None:
        """Mean seconds per command, or the publisher's "Time N/A" (-> None)."""
        if self.row.get(name) == TIME_NA:
            return None
        return self.number(name)


def _draft(r: _Row, mapping: Mapping, domains: dict[str, str]) -> TrialDraft:
    task, language = r.text("instance_id"), r.text("language").lower()
    framework, model = r.text("framework"), r.text("model_name")
    build = r.number("build", required=True)
    if build not in (0.0, 1.0):
        raise r.fail("build", f"expected 0 or 1, got {r.row.get('build')!r}")
    scores = {k: r.number(k, required=True, top=1.0) for k in SCORES}
    sp, exec_check = r.number("sp", top=1.0), r.number("exec_check", top=1.0)
    # sp (and exec_check) are 0 for some repositories where they were never computed
    sp_computed = sp is not None and not (sp == 0 and exec_check == 0 and (scores["exec"] or 0) > 0)
    rewards = {"build": float(build), **{f"all.{k}": float(v or 0.0) for k, v in scores.items()}}
    if sp_computed and sp is not None:
        rewards["all.side_effects"] = sp
    counts = {k: r.count(k) for k in COUNTS}
    sm = rewards["all.sm"]
    passed = sm >= mapping.pass_threshold
    return TrialDraft(
        where=r.where, task=task, agent=FRAMEWORKS.get(framework, framework.lower().replace(" ", "-")),
        model=model, status=TrialStatus.PASSED if passed else TrialStatus.FAILED,
        tier=None if counts["oracle_loc"] is None else tier_of(counts["oracle_loc"]),
        category=domains.get(task), tags=[f"language:{language}"], attempt=0,
        reward=sm, rewards=rewards, passed=passed,
        usage=TokenUsage(input=r.count("prompt_tokens"), output=r.count("completion_tokens")),
        cost_usd=r.number("cost"), turns=r.count("steps"),
        extra={"reward_metric": "sm", "framework": framework, "language": language,
               "time": r.seconds("time"), "oracle_time": r.seconds("oracle_time"),
               "sp": sp, "sp_computed": sp_computed, "exec_check": exec_check,
               **{k: v for k, v in counts.items() if v is not None}})


def import_clitoolbench(path: Path, mapping: Mapping | None = None, run_id: str | None = None,
                        categories: Path | None = None,
                        include_excluded: bool = False) -> ImportedRun:
    mapping = mapping or Mapping()
    data = _load(path, "the results")
    if not isinstance(data, list):
        raise ImportFormatError(f"{path}: expected a JSON array of result rows "
                                "(results_metadata_with_sp.json)")
    domains = read_categories(categories) if categories else {}
    drafts: list[TrialDraft] = []
    excluded = 0
    for n, row in enumerate(data, start=1):
        if not isinstance(row, dict):
            raise ImportFormatError(f"{path}: row {n}: expected an object")
        if row.get("instance_id") in EXCLUDED_REPOS and not include_excluded:
            excluded += 1
            continue
        drafts.append(_draft(_Row(path, n, row), mapping, domains))
    missing = sorted({d.task for d in drafts if d.category is None}) if categories else []
    # the funnel scores a failed build 0 on every level; the publisher averages the row values
    unbuilt = sum(1 for d in drafts if d.rewards["build"] == 0 and any(
        d.rewards[f"all.{k}"] for k in SCORES))
    imported = build_run(drafts, run_id=run_id or safe_run_id(f"clitoolbench-{path.stem}"),
                         source=mapping.source or "clitoolbench", origin=path,
                         settings={"format": "clitoolbench", "categories": str(categories)
                                   if categories else None, "include_excluded": include_excluded,
                                   "excluded_rows": excluded, "pass_threshold":
                                   mapping.pass_threshold})
    if excluded:
        imported.notes.append(f"{excluded} row(s) of the 6 repositories the publisher excluded "
                              "left out (--include-excluded keeps them)")
    if unbuilt:
        imported.notes.append(f"{unbuilt} row(s) with build 0 but a score above 0: the funnel "
                              "scores them 0, the publisher's plain mean does not")
    if missing:
        imported.notes.append(f"{len(missing)} task(s) not in {categories}: no domain "
                              f"({', '.join(missing[:5])}{', …' if len(missing) > 5 else ''})")
    return imported

"""Host side of differential testing: the engine's raw results → per-case verdicts → reward keys.

Per case (spec §5.1, docs/metrics.md): valid iff the oracle exited 0; Exec = the candidate exited
0; side effects equal = the same changed paths with the same change type and content (SHA-256 of
the whole file; the first 2,000 characters under ``compare_truncated_content``); EM, FM and the
SM variants are ``agentmeter.metrics.funnel.verdict``. Stdout is compared after stripping ANSI
escapes (the released regex) and the task's ``stdout_sanitizers``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmeter.metrics import funnel
from agentmeter.records import CaseOutcome
from agentmeter.verify.difftest.config import Case, DifftestConfig

ANSI = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
#: characters of each stream kept per case in the drill-down artifact
SHOWN_CHARS = 4000
#: the drill-down's similarity figure is computed only for outputs up to this length (FM itself
#: never needs the full distance: funnel.fuzzy_match)
SIMILARITY_MAX = 20_000


class FsChange(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["ADD", "DEL", "MOD"]
    sha256: str | None = None
    content: str = ""


class SideResult(BaseModel):
    """One side's run of one case, as the engine wrote it."""

    model_config = ConfigDict(extra="ignore")

    exit: int
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    fs_diff: dict[str, FsChange] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)


class CaseRecord(BaseModel):
    """One line of the engine's cases.jsonl."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    cls: str = Field(alias="class")
    status: Literal["ok", "framework_error"]
    error: str | None = None
    oracle: SideResult | None = None
    candidate: SideResult | None = None
    wall_s: float = 0.0


class BuildRecord(BaseModel):
    """The engine's build.json."""

    model_config = ConfigDict(extra="ignore")

    build: bool
    install_exit: int | None = None
    timed_out: bool = False
    duration_s: float | None = None
    resolved: bool = False
    bin_new: list[str] = Field(default_factory=list)
    help: dict[str, dict[str, Any]] = Field(default_factory=dict)
    log: str = ""
    #: files, loc, directories, depth of what the agent wrote (engine.structure)
    structure: dict[str, int] = Field(default_factory=dict)


def sanitize(text: str, cfg: DifftestConfig) -> str:
    text = ANSI.sub("", text)
    for s in cfg.stdout_sanitizers:
        text = re.sub(s.pattern, s.replacement, text)
    return text


def side_effects_equal(a: dict[str, FsChange], b: dict[str, FsChange], truncated: bool) -> bool:
    if a.keys() != b.keys():
        return False
    for path, x in a.items():
        y = b[path]
        if x.type != y.type or (x.content != y.content if truncated else x.sha256 != y.sha256):
            return False
    return True


def parse_records(text: str) -> tuple[dict[str, CaseRecord], int]:
    """The engine's per-case records by id, and how many lines were unreadable (a line cut
    short by the verifier's time limit, say)."""
    records: dict[str, CaseRecord] = {}
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            r = CaseRecord.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            bad += 1
            continue
        records[r.id] = r
    return records, bad


def _judged(o: CaseOutcome) -> CaseOutcome:
    v = funnel.verdict(funnel.CaseResult(
        case_id=o.id, command_class=o.cls, oracle_exit=o.oracle_exit or 0,
        candidate_exit=o.candidate_exit, side_effects_equal=o.side_effects,
        oracle_stdout=o.oracle_stdout, candidate_stdout=o.candidate_stdout,
        semantic_equal=o.judge))
    return o.model_copy(update={"exec": v.exec, "em": v.em, "fm": v.fm, "sm": v.sm,
                                "sm_fm": v.sm_fm, "sm_nogate": v.sm_nogate})


def outcomes(cases: list[Case], records: dict[str, CaseRecord], cfg: DifftestConfig,
             keys: dict[str, str], built: bool = True) -> list[CaseOutcome]:
    """Every case's outcome before any judge verdict (SM variants that need one are None).
    When the candidate did not build, no case ran for it: each is ``not_built`` (a candidate
    failure), never a framework error."""
    out: list[CaseOutcome] = []
    for case in cases:
        base = CaseOutcome(id=case.id, cls=case.cls, key=keys[case.cls], command=case.command,
                           status="not_run")
        r = records.get(case.id)
        if not built:
            out.append(base.model_copy(update={"status": "not_built"}))
            continue
        if r is None:
            out.append(base)
            continue
        if r.status == "framework_error" or r.oracle is None:
            out.append(base.model_copy(update={"status": "framework_error", "error": r.error}))
            continue
        o, c = r.oracle, r.candidate
        upd: dict[str, Any] = {
            "oracle_exit": o.exit, "oracle_stdout": sanitize(o.stdout, cfg),
            "oracle_fs": {p: ch.type for p, ch in o.fs_diff.items()},
            "status": "valid" if o.exit == 0 else "oracle_failed"}
        if c is not None:
            upd.update(candidate_exit=c.exit, candidate_stdout=sanitize(c.stdout, cfg),
                       candidate_stderr=c.stderr[-SHOWN_CHARS:], candidate_timed_out=c.timed_out,
                       candidate_fs={p: ch.type for p, ch in c.fs_diff.items()},
                       side_effects=side_effects_equal(o.fs_diff, c.fs_diff,
                                                       bool(cfg.compare_truncated_content)))
        if c is not None and o.exit != 0:  # a negative case: paper §5.1's robustness
            agree = c.exit != 0
            upd.update(error_agree=agree, error_output_match=agree and funnel.fuzzy_match(
                sanitize(o.stdout + o.stderr, cfg), sanitize(c.stdout + c.stderr, cfg)))
        outcome = base.model_copy(update=upd)
        if outcome.status == "valid":
            outcome = _judged(outcome)
            small = max(len(outcome.oracle_stdout), len(outcome.candidate_stdout)) <= SIMILARITY_MAX
            if outcome.exec and outcome.side_effects and small:  # for the drill-down only
                outcome = outcome.model_copy(update={"similarity": round(funnel.similarity(
                    outcome.oracle_stdout, outcome.candidate_stdout), 6)})
        out.append(outcome)
    return out


def with_verdict(o: CaseOutcome, equivalent: bool | None, reason: str | None) -> CaseOutcome:
    return _judged(o.model_copy(update={"judge": equivalent, "judge_reason": reason}))


LEVELS = ("exec", "side_effects", "em", "fm", "sm", "sm_fm", "sm_nogate")


def rewards(build: BuildRecord, results: list[CaseOutcome],
            judged: bool) -> tuple[dict[str, float], funnel.FunnelScore]:
    """The trial's named rewards (docs/difftest.md): ``build``, per class key ``<key>.<level>``
    and ``<key>.cases``, and the case counts (SM levels are left out without a judge), with the
    repository's funnel score over them (``funnel.score_from_rates``, Eq. 3–4)."""
    named: dict[str, float] = {"build": float(build.build)}
    by_class: dict[str, list[CaseOutcome]] = {}
    for o in results:
        if o.status == "valid":
            by_class.setdefault(o.key, []).append(o)
    levels = LEVELS if judged else LEVELS[:4]
    rates: dict[str, dict[str, float | None]] = {}
    if build.build:
        for key, os_ in sorted(by_class.items()):
            rates[key] = {}
            for level in levels:
                vals = [funnel.side_effects_pass(o.exec, o.side_effects)
                        if level == "side_effects" else getattr(o, level) for o in os_]
                if any(v is None for v in vals):
                    continue  # a judge verdict is missing: this class's level is n/a
                rates[key][level] = named[f"{key}.{level}"] = sum(map(bool, vals)) / len(vals)
            named[f"{key}.cases"] = float(len(os_))
    counts = {"cases_total": len(results),
              "cases_valid": sum(o.status == "valid" for o in results),
              "cases_oracle_failed": sum(o.status == "oracle_failed" for o in results),
              "cases_framework_error": sum(o.status == "framework_error" for o in results),
              "cases_not_run": sum(o.status == "not_run" for o in results),
              "cases_not_built": sum(o.status == "not_built" for o in results)}
    named.update({k: float(v) for k, v in counts.items()})
    named.update(robustness(build, results))
    return named, funnel.score_from_rates(build.build, rates, counts["cases_valid"])


def robustness(build: BuildRecord, results: list[CaseOutcome]) -> dict[str, float]:
    """Paper §5.1, "Robustness to Invalid Inputs": the negative cases (the oracle exited
    non-zero), which no funnel level scores, scored for the candidate: ``negative_cases``, the
    share where the candidate also exited non-zero (``negative_exit_agree``) and where in
    addition its merged stdout+stderr fuzzy-matches the oracle's (``negative_output_match``,
    τ = 0.8; error text usually goes to stderr). Nothing when the candidate did not build (no
    case ran; the analysis scores that repository 0, Eq. 4's rule)."""
    if not build.build:
        return {}
    ran = [o for o in results if o.status == "oracle_failed" and o.error_agree is not None]
    if not ran:
        return {"negative_cases": 0.0}
    return {"negative_cases": float(len(ran)),
            "negative_exit_agree": sum(bool(o.error_agree) for o in ran) / len(ran),
            "negative_output_match": sum(bool(o.error_output_match) for o in ran) / len(ran)}


def ms_per_command(records: dict[str, CaseRecord]) -> dict[str, float]:
    """Mean command time per side (Table 4's runtime columns), over cases both sides ran."""
    pairs = [(r.oracle, r.candidate) for r in records.values()
             if r.oracle is not None and r.candidate is not None]
    if not pairs:
        return {}
    return {"oracle_ms_per_cmd": 1000 * sum(o.duration_s for o, _ in pairs) / len(pairs),
            "candidate_ms_per_cmd": 1000 * sum(c.duration_s for _, c in pairs) / len(pairs)}

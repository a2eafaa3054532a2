"""The differential-test drill-down of a CLI-generation (``difftest``) trial, as an HTML fragment
the report's drawer and the viewer show: the build and entry-point diagnostics, what the judge
cost, a per-class table (template, valid cases, Exec/SE/EM/FM/SM rates) and a per-case table,
failing cases first, each expanding to the oracle's and the candidate's stdout side by side.

Read from the trial's stored artifacts ``difftest_cases.jsonl`` (one case per line, as the
verifier wrote it) and ``classes.json``, and from its rewards and ``extra``. Everything shown is
escaped here; a line that does not parse is skipped and counted in a note, a missing or
malformed file is named, never fatal. The text embedded is bounded by a :class:`TextBudget`
(failing cases take it first); what does not fit is marked, the artifact file stays linked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentmeter.metrics.funnel import side_effects_pass
from agentmeter.records import CaseOutcome
from agentmeter.report.html.fmt import NA, esc, pct, usd

CASES_ARTIFACT = "difftest_cases.jsonl"
CLASSES_ARTIFACT = "classes.json"
#: the most of difftest_cases.jsonl read, and the most cases kept
MAX_FILE_BYTES = 64 << 20
MAX_CASES = 5000
#: failing cases shown expanded when the drill-down opens
OPEN_FAILING = 5
LEVELS = (("exec", "Exec"), ("side_effects", "SE"), ("em", "EM"), ("fm", "FM"), ("sm", "SM"))
#: outcome -> (sort order, label)
OUTCOMES = {"fail": (0, "failing"), "error": (1, "not run / not built / framework error"),
            "pass": (2, "passing"), "excluded": (3, "excluded (the oracle failed)")}


def outcome(c: CaseOutcome, metric: str) -> str:
    """pass / fail / error / excluded, by the trial's reward metric (SM when judged)."""
    if c.status == "oracle_failed":
        return "excluded"
    if c.status != "valid":
        return "error"
    ok = c.sm if metric == "sm" and c.sm is not None else c.fm
    return "pass" if ok else "fail"


@dataclass
class Parsed:
    cases: list[CaseOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_cases(path: Path) -> Parsed:
    """The cases of one artifact file; unreadable lines skipped with a note each (the first
    few named by line number and field)."""
    out = Parsed()
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES)
    except OSError as e:
        out.notes.append(f"{CASES_ARTIFACT}: cannot be read ({e.strerror or e})")
        return out
    if size > MAX_FILE_BYTES:
        out.notes.append(f"{CASES_ARTIFACT}: only the first {MAX_FILE_BYTES >> 20} MiB read")
    lines = raw.decode("utf-8", "replace").splitlines()
    if size > MAX_FILE_BYTES and lines:
        lines.pop()  # cut in the middle
    bad: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(out.cases) >= MAX_CASES:
            out.notes.append(f"{CASES_ARTIFACT}: only the first {MAX_CASES} cases shown")
            break
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                bad.append(f"line {n}: not a JSON object")
                continue
            out.cases.append(CaseOutcome.model_validate(obj))
        except json.JSONDecodeError as e:
            bad.append(f"line {n}: not JSON ({e.msg})")
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            bad.append(f"line {n}: field {where}: {err['msg']}")
    if bad:
        shown = "; ".join(bad[:3]) + (f"; … ({len(bad) - 3} more)" if len(bad) > 3 else "")
        out.notes.append(f"{CASES_ARTIFACT}: {len(bad)} line(s) could not be read and are "
                         f"skipped: {shown}")
    return out


def read_classes(path: Path | None, fallback: Any) -> tuple[dict[str, str], list[str]]:
    """{c01: template} from ``classes.json``, else the trial's ``extra["difftest_classes"]``."""
    notes: list[str] = []
    if path is not None:
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
            if isinstance(data, dict):
                return {str(k): str(v) for k, v in data.items()}, notes
            notes.append(f"{CLASSES_ARTIFACT}: not a JSON object")
        except (OSError, json.JSONDecodeError) as e:
            notes.append(f"{CLASSES_ARTIFACT}: cannot be read ({e})")
    if isinstance(fallback, dict):
        return {str(k): str(v) for k, v in fallback.items()}, notes
    return {}, notes


@dataclass
class Budget:
    """Characters of case output still embeddable (the report's size bound)."""

    remaining: int
    per_stream: int


def _rate(v: Any) -> str:
    return pct(float(v), 1) if isinstance(v, int | float) else NA


def _flag(v: bool | None, title: str) -> str:
    if v is None:
        return f'<td class="flag na" title="{esc(title)}: n/a">–</td>'
    cls, mark = ("ok", "✓") if v else ("no", "✗")
    return f'<td class="flag {cls}" title="{esc(title)}: {"yes" if v else "no"}">{mark}</td>'


def judge_summary(extra: Mapping[str, Any]) -> str | None:
    """What judging the trial cost (``extra["evaluation"]``), as plain text; None: not judged."""
    ev = extra.get("evaluation")
    if not isinstance(ev, dict):
        return None
    cost = ev.get("cost_usd")
    return (f"{ev.get('model')} · {ev.get('calls', 0)} call(s) · "
            f"{usd(cost) if isinstance(cost, int | float) else NA} "
            "(evaluation cost, not the agent's)")


def _summary(rewards: Mapping[str, float], extra: Mapping[str, Any]) -> str:
    build = rewards.get("build")
    cause = extra.get("build_cause")
    items = [("build", NA if build is None else ("passed" if build else "failed (a candidate "
                                                 "failure" + (f": {cause}" if cause else "")
                                                 + "; see install.log)"))]
    ep = extra.get("entry_point")
    if isinstance(ep, dict):
        found = ep.get("found")
        items.append(("entry point", f"expected {ep.get('expected')!s}, found "
                      f"{found if found else 'none'}"
                      + (f" ({ep.get('rule')})" if ep.get("rule") else "")
                      + f"; --help {'works' if ep.get('help_ok') else 'fails'}"))
    metric = extra.get("reward_metric")
    if metric:
        items.append(("reward", f"{str(metric).upper()} macro-average over classes"))
    judge = judge_summary(extra)
    if judge is not None:
        items.append(("judge", judge))
    elif metric == "fm":
        items.append(("judge", "none: SM n/a, the reward is FM"))
    counts = [f"{int(rewards[k])} {label}" for k, label in (
        ("cases_total", "cases"), ("cases_valid", "valid"),
        ("cases_oracle_failed", "excluded (oracle failed)"),
        ("cases_framework_error", "framework errors"), ("cases_not_run", "not run"),
        ("cases_not_built", "not run: the candidate did not build"))
        if isinstance(rewards.get(k), int | float)]
    if counts:
        items.append(("cases", " · ".join(counts)))
    return ('<dl class="kv dt-summary">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"
                                                   for k, v in items) + "</dl>")


def _class_table(classes: dict[str, str], cases: list[CaseOutcome],
                 rewards: Mapping[str, float]) -> str:
    keys = list(classes)
    for c in cases:  # a class only the cases name
        if c.key and c.key not in classes:
            keys.append(c.key)
    keys += sorted({k.split(".")[0] for k in rewards if "." in k} - set(keys))
    if not keys:
        return '<p class="na">Per-class rates: n/a — no command class recorded</p>'
    valid: dict[str, int] = {}
    for c in cases:
        if c.status == "valid":
            valid[c.key] = valid.get(c.key, 0) + 1
    rows = []
    for k in keys:
        n = rewards.get(f"{k}.cases", valid.get(k))
        cells = "".join(f'<td class="num">{_rate(rewards.get(f"{k}.{lvl}"))}</td>'
                        for lvl, _ in LEVELS)
        rows.append(f'<tr data-class="{esc(k)}"><td>{esc(k)}</td>'
                    f'<td class="text"><code>{esc(classes.get(k, NA))}</code></td>'
                    f'<td class="num">{NA if n is None else int(n)}</td>{cells}</tr>')
    macro = "".join(f'<td class="num">{_macro(rewards, keys, lvl)}</td>' for lvl, _ in LEVELS)
    head = "".join(f"<th>{h}</th>" for _, h in LEVELS)
    return ('<div class="table-wrap"><table class="small dt-classes"><thead><tr><th>Class</th>'
            f'<th>Template</th><th>Valid cases</th>{head}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody><tfoot><tr><td colspan="3">macro-average</td>{macro}</tr></tfoot>'
            "</table></div>")


def _macro(rewards: Mapping[str, float], keys: list[str], level: str) -> str:
    vals = [rewards[f"{k}.{level}"] for k in keys
            if isinstance(rewards.get(f"{k}.{level}"), int | float)]
    return _rate(sum(vals) / len(vals)) if vals else NA


#: why a side has no run to show, by case status
NOT_RUN = {"not_built": "not run: the candidate did not build",
           "not_run": "not run: the engine did not reach this case",
           "framework_error": "no result: a framework error (below)"}


def _pane(title: str, text: str, shown: str, not_run: str | None = None) -> str:
    if not_run is not None:
        body = f'<p class="na">{esc(not_run)}</p>'
    elif not text:
        body = '<p class="na">(empty)</p>'
    else:
        body = f"<pre>{esc(shown)}</pre>" + (
            f"<small>… {len(text) - len(shown):,} more characters not shown</small>"
            if len(shown) < len(text) else "")
    return f'<div class="dt-pane"><b>{esc(title)}</b>{body}</div>'


def _fs(changes: dict[str, str]) -> str:
    if not changes:
        return "none"
    return ", ".join(f"{esc(t)} {esc(p)}" for p, t in sorted(changes.items())[:50]) + (
        f" … ({len(changes) - 50} more)" if len(changes) > 50 else "")


def case_body(c: CaseOutcome, budget: Budget) -> str | None:
    """What an expanded case shows: both stdouts side by side, the candidate's stderr, file
    changes, similarity and the judge's reason; None when its output does not fit ``budget``
    (the whole case or nothing: failing cases come first)."""
    streams = (c.oracle_stdout, c.candidate_stdout, c.candidate_stderr)
    shown = [t[:budget.per_stream] for t in streams]
    need = sum(len(t) for t in shown)
    if need > budget.remaining:
        return None
    budget.remaining -= need
    panes = "".join(
        _pane(f"{side} stdout" + ("" if code is None else f" (exit {code})"), text, part,
              None if code is not None else NOT_RUN.get(c.status, "not run"))
        for side, code, text, part in (("oracle", c.oracle_exit, c.oracle_stdout, shown[0]),
                                       ("candidate", c.candidate_exit, c.candidate_stdout,
                                        shown[1])))
    more = [f"<p><b>class</b> <code>{esc(c.cls)}</code></p>"]
    if c.error:
        more.append(f'<p class="err"><b>error</b> {esc(c.error)}</p>')
    if c.candidate_stderr:
        more.append(_pane("candidate stderr", c.candidate_stderr, shown[2]))
    if c.oracle_fs or c.candidate_fs:
        more.append(f"<p><b>files</b> oracle: {_fs(c.oracle_fs)} · candidate: "
                    f"{_fs(c.candidate_fs)}</p>")
    if c.similarity is not None:
        more.append(f"<p><b>similarity</b> {c.similarity:.3f}</p>")
    if c.judge is not None or c.judge_reason:
        verdict = NA if c.judge is None else ("same" if c.judge else "different")
        more.append(f'<p class="judge"><b>judge</b> {verdict}: {esc(c.judge_reason or "")}</p>')
    return f'<div class="dt-sides">{panes}</div>{"".join(more)}'


def case_detail(path: Path, case_id: str, per_stream: int) -> str | None:
    """One case's expanded view from the artifact file (the viewer loads a case whose output
    did not fit the drill-down's budget on demand); None if there is no such case."""
    for c in read_cases(path).cases:
        if c.id == case_id:
            return case_body(c, Budget(remaining=3 * per_stream, per_stream=per_stream))
    return None


def _case(c: CaseOutcome, outcome: str, opened: bool, budget: Budget, cols: int) -> str:
    sim = f" ({c.similarity:.2f})" if c.similarity is not None else ""
    shown = outcome if c.status == "valid" else c.status
    exits = (f'<td class="num">{NA if c.oracle_exit is None else c.oracle_exit}</td>'
             f'<td class="num">{NA if c.candidate_exit is None else c.candidate_exit}'
             f'{" ⏱" if c.candidate_timed_out else ""}</td>')
    # SE as the class table's column: Exec and equal side effects (funnel.side_effects_pass)
    se = side_effects_pass(c.exec, c.side_effects) if c.status == "valid" else None
    flags = (_flag(c.exec, "Exec") + _flag(se, "SE") + _flag(c.em, "EM")
             + _flag(c.fm, f"FM{sim}") + _flag(c.judge, "judge") + _flag(c.sm, "SM"))
    head = (f'<tr class="case-head"><td><button type="button" class="case-toggle" '
            f'aria-expanded="{"true" if opened else "false"}">{esc(c.id)}</button></td>'
            f"<td>{esc(c.key)}</td><td class=\"cmd\"><code>{esc(c.command)}</code></td>"
            f'<td><span class="dt-{outcome}" title="status {esc(c.status)}">{esc(shown)}</span>'
            f"</td>{exits}{flags}</tr>")
    inner = case_body(c, budget)
    lazy = ""
    if inner is None:
        lazy = ' data-lazy="1"'
        inner = ('<p class="na dt-lazy">not embedded (size budget): see the '
                 f"{CASES_ARTIFACT} artifact</p>")
    body = (f'<tr class="case-more"{"" if opened else " hidden"}{lazy}><td colspan="{cols}">'
            f"{inner}</td></tr>")
    return (f'<tbody class="case" data-outcome="{outcome}" data-case="{esc(c.id)}">{head}{body}'
            "</tbody>")


def _case_table(cases: list[CaseOutcome], metric: str, budget: Budget) -> str:
    if not cases:
        return '<p class="na">Per-case results: n/a — no case recorded</p>'
    ranked = sorted(((OUTCOMES[outcome(c, metric)][0], i, outcome(c, metric), c)
                     for i, c in enumerate(cases)), key=lambda x: (x[0], x[1]))
    counts: dict[str, int] = {}
    for _, _, o, _ in ranked:
        counts[o] = counts.get(o, 0) + 1
    options = f'<option value="all">all ({len(cases)})</option>' + "".join(
        f'<option value="{o}">{label} ({counts[o]})</option>'
        for o, (_, label) in OUTCOMES.items() if counts.get(o))
    head = ("<th>Case</th><th>Class</th><th>Command</th><th>Status</th><th>Oracle exit</th>"
            "<th>Candidate exit</th><th>Exec</th><th>SE</th><th>EM</th><th>FM</th>"
            "<th>Judge</th><th>SM</th>")
    cols = head.count("<th>")
    opened = 0
    bodies = []
    for _, _, o, c in ranked:
        show = o == "fail" and opened < OPEN_FAILING
        opened += show
        bodies.append(_case(c, o, show, budget, cols))
    return (f'<p class="controls">Show <select class="dt-filter" aria-label="cases to show">'
            f'{options}</select> <small>failing cases first; a case expands to both outputs'
            f'</small></p><div class="table-wrap"><table class="small dt-cases" data-show="all">'
            f'<thead><tr>{head}</tr></thead>{"".join(bodies)}</table></div>')


def render(rewards: Mapping[str, float], extra: Mapping[str, Any], cases_path: Path | None,
           classes_path: Path | None, *, has_cases_artifact: bool, budget: Budget,
           ident: Mapping[str, str | int] | None = None) -> str:
    """The whole fragment for one trial; ``ident`` (run, trial, try) lets the viewer load a
    case that did not fit the budget."""
    notes: list[str] = []
    parsed = Parsed()
    if cases_path is not None:
        parsed = read_cases(cases_path)
    elif has_cases_artifact:
        notes.append(f"{CASES_ARTIFACT}: the artifact file is missing")
    else:
        notes.append(f"no {CASES_ARTIFACT} artifact: per-case results n/a")
    notes += parsed.notes
    classes, class_notes = read_classes(classes_path, extra.get("difftest_classes"))
    notes += class_notes
    metric = "sm" if extra.get("reward_metric") == "sm" else "fm"
    note_html = ('<ul class="dt-notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                 + "</ul>") if notes else ""
    # data-dt-*: a plain data-trial would make a click anywhere in it open that trial
    attrs = "".join(f' data-dt-{k}="{esc(v)}"' for k, v in (ident or {}).items())
    return (f'<div class="difftest"{attrs}>{_summary(rewards, extra)}{note_html}'
            f"<h4>Per command class</h4>{_class_table(classes, parsed.cases, rewards)}"
            f"<h4>Per case</h4>{_case_table(parsed.cases, metric, budget)}</div>")


def is_difftest(rewards: Mapping[str, float], extra: Mapping[str, Any],
                artifact_names: set[str]) -> bool:
    return CASES_ARTIFACT in artifact_names or "difftest_classes" in extra

"""AgencyBench in the HTML report and the viewer: the per-configuration summary and one row per
scenario (:func:`section`), and a scenario step's drill-down (:func:`drill`): its feedback rounds
(score, the feedback sent before the round), each round's rubric items (id, description,
satisfied, reason), the browser capture's screenshots (inline ``<img>``) and video
(``<video controls>``), and what judging it cost.

Read from the trial's ``extra`` (``scenario``, ``position``, ``scenario_run``, ``rounds``,
``round_scores``, ``feedback``, ``skipped``, ``session_continuity``, ``rubric``, ``evaluation``)
and its artifacts ``rounds/<r>/...`` (``rounds/<r>/feedback.md``, ``rounds/<r>/rubric.json``,
screenshots and videos). Everything shown is escaped here; a malformed rubric file is named,
never fatal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmeter.metrics.from_store import AgencyReport
from agentmeter.report.html.collect import ConfigView
from agentmeter.report.html.difftest import judge_summary
from agentmeter.report.html.fmt import NA, esc, num, pct, sort_key
from agentmeter.report.html.sections import config_cell
from agentmeter.store.artifacts import artifact_file
from agentmeter.store.browse import ArtifactRow

RUBRIC_ARTIFACT = "rubric.json"
FEEDBACK_ARTIFACT = "feedback.md"
#: the most of one rubric.json read, the most items shown, characters of one feedback text
MAX_RUBRIC_BYTES = 512 << 10
MAX_ITEMS = 300
MAX_FEEDBACK = 6000
SHOWN = "AgencyBench rounds"
_ROUND = re.compile(r"^rounds/(\d+)/(.+)$")
_KEYS = ("scenario", "round_scores", "rounds", "feedback", "rubric", "skipped")


# --- the report section ------------------------------------------------------------------------

def _td(text: str, key: float | None | str, cls: str = "num") -> str:
    sk = key if isinstance(key, str) else sort_key(key)
    na = " na" if text == NA else ""
    return f'<td class="{cls}{na}" data-sort="{esc(sk)}">{text}</td>'


def _rise(v: float | None) -> str:
    return NA if v is None else f"{v:+.1f}%"


def section(report: AgencyReport | None, configs: Sequence[ConfigView]) -> str:
    """The AgencyBench section (empty when the runs hold no scenario trials)."""
    if report is None:
        return ""
    ks = report.ks
    by_id = {c.id: c for c in configs}
    head = ["Configuration", "Scenarios", "Tasks", "S<sub>avg</sub>", "Att",
            *(f"Pass@{k} scen." for k in ks), "Rise scen.", *(f"Pass@{k} tasks" for k in ks),
            "Rise tasks", *(f"Avg({k})" for k in ks), "Tok (M)", "T (h)", "E<sub>att</sub>",
            "E<sub>tok</sub>", "Skipped"]
    ths = "".join(f'<th data-type="{"text" if i == 0 else "num"}" tabindex="0">{h}</th>'
                  for i, h in enumerate(head))
    rows, scen_rows = [], []
    for r in report.rows:
        cfg = by_id.get(r.config_id)
        label = config_cell(cfg) if cfg else esc(r.label)
        s = r.summary
        if s is None:
            rows.append(f'<tr data-config="{esc(r.config_id)}">{_td(label, r.label, "text")}'
                        + "".join(_td(NA, None) for _ in head[1:]) + "</tr>")
            continue
        tok = s.tokens_per_scenario
        cells = [_td(label, r.label, "text"), _td(str(s.n_scenarios), float(s.n_scenarios)),
                 _td(str(s.n_tasks), float(s.n_tasks)), _td(num(s.s_avg, 1), s.s_avg),
                 _td(num(s.att, 2), s.att)]
        cells += [_td(pct(s.pass_at_scenario.get(k), 1), s.pass_at_scenario.get(k)) for k in ks]
        cells.append(_td(_rise(s.rise_scenario), s.rise_scenario))
        cells += [_td(pct(s.pass_at.get(k), 1), s.pass_at.get(k)) for k in ks]
        cells.append(_td(_rise(s.rise), s.rise))
        cells += [_td(num(s.avg_at.get(k), 1), s.avg_at.get(k)) for k in ks]
        cells += [_td(NA if tok is None else f"{tok / 1e6:.3g}", tok),
                  _td(num(s.hours_per_scenario, 2), s.hours_per_scenario),
                  _td(num(s.e_att, 1), s.e_att),
                  _td(NA if s.e_tok_m is None else f"{s.e_tok_m:.3g}", s.e_tok_m),
                  _td(str(s.n_skipped), float(s.n_skipped))]
        rows.append(f'<tr data-config="{esc(r.config_id)}">{"".join(cells)}</tr>')
        for sc in s.scenarios:
            passed_at = "".join(
                _td(NA if sc.passed_at.get(k) is None else ("yes" if sc.passed_at[k] else "no"),
                    None if sc.passed_at.get(k) is None else float(bool(sc.passed_at[k])))
                for k in ks)
            skipped = f" <small>({sc.n_skipped} skipped)</small>" if sc.n_skipped else ""
            scen_rows.append(
                f'<tr data-config="{esc(r.config_id)}" data-scenario="{esc(sc.scenario)}">'
                f'{_td(label, r.label, "text")}{_td(esc(sc.scenario), sc.scenario, "text")}'
                f'{_td(esc(sc.category or NA), sc.category or "", "text")}'
                f"{_td(f'{sc.n_tasks}{skipped}', float(sc.n_tasks))}"
                f"{_td(num(sc.s_avg, 1), sc.s_avg)}{_td(num(sc.att, 2), sc.att)}"
                f"{_td(f'{sc.passed}/{sc.n_tasks}', float(sc.passed))}"
                f"{_td(str(sc.rounds), float(sc.rounds))}{passed_at}"
                f"{_td(num(sc.hours, 2), sc.hours)}</tr>")
    scen_head = "".join(
        f'<th data-type="{t}" tabindex="0">{h}</th>' for h, t in (
            ("Configuration", "text"), ("Scenario", "text"), ("Capability", "text"),
            ("Tasks", "num"), ("S<sub>avg</sub>", "num"), ("Att", "num"),
            ("Passed tasks", "num"), ("Rounds", "num"),
            *((f"Pass@{k}", "num") for k in ks), ("T (h)", "num")))
    notes = "".join(f"<li>{esc(n)}</li>" for n in report.notes)
    return (
        '<section id="agency"><h2>AgencyBench</h2>'
        '<div class="table-wrap"><table id="agency-table" class="sortable">'
        f'<thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
        '<p class="meta">S<sub>avg</sub>, Avg(k) in %; Att = rounds used per task that ran; '
        "Pass@k scen. = scenarios passed within k rounds / scenarios (the paper's unit; "
        f"scenario pass rule <b>{esc(report.scenario_pass_rule)}</b>, an inference); "
        "Tok = millions of tokens per scenario; T = agent hours per scenario; "
        "E<sub>att</sub> = S<sub>avg</sub>/Att, E<sub>tok</sub> = S<sub>avg</sub>/Tok.</p>"
        '<h3>Per scenario</h3><div class="table-wrap"><table id="agency-scenarios" '
        f'class="sortable small"><thead><tr>{scen_head}</tr></thead>'
        f'<tbody>{"".join(scen_rows)}</tbody></table></div>'
        + (f'<details class="notes"><summary>Notes</summary><ul>{notes}</ul></details>'
           if notes else "") + "</section>")


# --- the trial drill-down ----------------------------------------------------------------------

def is_agency(extra: Mapping[str, Any], names: Sequence[str]) -> bool:
    return any(k in extra for k in _KEYS) or any(
        _ROUND.match(n) or n == RUBRIC_ARTIFACT for n in names)


def _round_of(name: str) -> tuple[int | None, str]:
    m = _ROUND.match(name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


def _rubric_items(raw: Any) -> list[dict[str, Any]] | None:
    if isinstance(raw, dict):
        raw = raw.get("items", raw.get("rubric"))
    if not isinstance(raw, list):
        return None
    return [i for i in raw if isinstance(i, dict)][:MAX_ITEMS]


def _read_rubric(path: Path) -> tuple[list[dict[str, Any]] | None, str | None]:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_RUBRIC_BYTES + 1)
        if len(data) > MAX_RUBRIC_BYTES:
            return None, f"{path.name}: larger than {MAX_RUBRIC_BYTES} bytes, not shown"
        items = _rubric_items(json.loads(data))
    except (OSError, ValueError) as e:
        return None, f"{path.name}: unreadable ({type(e).__name__})"
    return (items, None) if items is not None else (None, f"{path.name}: not a list of items")


def _rubric_table(items: list[dict[str, Any]], rnd: int) -> str:
    rows = []
    for it in items:
        sat = it.get("satisfied")
        mark, cls = ("✓", "ok") if sat is True else ("✗", "no") if sat is False else ("–", "na")
        rows.append(f'<tr class="{cls}" data-item="{esc(it.get("id", ""))}">'
                    f'<td>{esc(it.get("id", ""))}</td><td>{esc(it.get("description", ""))}</td>'
                    f'<td class="flag {cls}">{mark}</td><td>{esc(it.get("reason") or "")}</td>'
                    f'<td>{esc(it.get("check") or "")}</td></tr>')
    n_ok = sum(1 for it in items if it.get("satisfied") is True)
    return (f'<table class="small rubric" data-round="{rnd}"><caption>round {rnd}: {n_ok}/'
            f"{len(items)} criteria satisfied</caption><thead><tr><th>Id</th><th>Criterion</th>"
            "<th>Satisfied</th><th>Reason</th><th>Check</th></tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table>')


def _media(entry: dict[str, Any]) -> str:
    name = esc(entry["name"])
    if entry.get("media") == "image":
        src = entry.get("data") or entry.get("href") or ""
        return (f'<figure><img class="shot" alt="{name}" loading="lazy" '
                f'src="{esc(src)}"><figcaption>{name}</figcaption></figure>')
    return (f'<figure><video class="shot" controls preload="metadata" '
            f'src="{esc(entry.get("href") or "")}"></video><figcaption>{name} · <a href="'
            f'{esc(entry.get("href") or "")}" target="_blank" rel="noopener">open</a>'
            "</figcaption></figure>")


def _feedback(extra: Mapping[str, Any], rnd: int, entries: Mapping[str, dict[str, Any]]
              ) -> str | None:
    fb = extra.get("feedback")
    if isinstance(fb, list) and 0 <= rnd - 2 < len(fb) and isinstance(fb[rnd - 2], str):
        return str(fb[rnd - 2])[:MAX_FEEDBACK]
    e = entries.get(f"rounds/{rnd}/{FEEDBACK_ARTIFACT}")
    text: object = e.get("text") if e else None
    return text[:MAX_FEEDBACK] if isinstance(text, str) else None


def _mark_shown(entry: dict[str, Any] | None) -> None:
    """An artifact shown in the rounds view: listed with its link, its content not repeated."""
    if entry is not None:
        entry["shown"] = SHOWN
        entry.pop("data", None)
        entry.pop("text", None)


def drill(extra: Mapping[str, Any], reward: float | None, artifacts: Sequence[ArtifactRow],
          entries: list[dict[str, Any]], run_dir: Path | None) -> str | None:
    """A scenario step's rounds, rubric items, media and judge cost (None for other trials).
    The media entries shown here are marked ``shown`` (their image data moves here, not
    embedded twice)."""
    names = [a.name for a in artifacts]
    if not is_agency(extra, names):
        return None
    by_name = {e["name"]: e for e in entries}
    rel = {a.name: a.relpath for a in artifacts}
    raw_scores = extra.get("round_scores")
    scores = raw_scores if isinstance(raw_scores, list) else []
    n = extra.get("rounds")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
    from_names = [r for r, _ in map(_round_of, names) if r is not None]
    n_rounds = n if n is not None else max([len(scores), *from_names, 1])
    items: list[tuple[str, str]] = []
    for key, label in (("scenario", "scenario"), ("position", "step"),
                       ("scenario_run", "scenario run"), ("category", "capability"),
                       ("session_continuity", "session kept across prompts")):
        if key in extra:
            items.append((label, str(extra[key])))
    items.append(("rounds used", str(n_rounds)))
    if extra.get("skipped") is True:
        items.append(("skipped", "yes: its scenario halted before this step (scored 0)"))
    judge = judge_summary(extra)
    items.append(("judge", judge if judge is not None else "none recorded"))
    problems: list[str] = []
    rounds_html, rubric_html, media_html = [], [], []
    for rnd in range(1, n_rounds + 1):
        s = scores[rnd - 1] if rnd - 1 < len(scores) else None
        if s is None and rnd == n_rounds and reward is not None:
            s = 10.0 * reward
        score = NA if not isinstance(s, int | float) else f"{s:.1f}"
        fb = _feedback(extra, rnd, by_name) if rnd > 1 else None
        if fb:
            _mark_shown(by_name.get(f"rounds/{rnd}/{FEEDBACK_ARTIFACT}"))
        fb_html = f"<pre>{esc(fb)}</pre>" if fb else ("–" if rnd == 1 else NA)
        rub = None
        for name in (f"rounds/{rnd}/{RUBRIC_ARTIFACT}",
                     *((RUBRIC_ARTIFACT,) if rnd == n_rounds else ())):
            path = (artifact_file(run_dir, rel[name])
                    if name in rel and run_dir is not None else None)
            if path is not None:
                rub, problem = _read_rubric(path)
                if problem:
                    problems.append(problem)
                if rub is not None:
                    _mark_shown(by_name.get(name))
                    break
        if rub is None and rnd == n_rounds:
            rub = _rubric_items(extra.get("rubric"))
        criteria = NA
        if rub is not None:
            criteria = f"{sum(1 for i in rub if i.get('satisfied') is True)}/{len(rub)}"
            rubric_html.append(_rubric_table(rub, rnd))
        rounds_html.append(f'<tr data-round="{rnd}"><td class="num">{rnd}</td>'
                           f'<td class="num">{score}</td><td class="num">{criteria}</td>'
                           f"<td>{fb_html}</td></tr>")
    groups: dict[int | None, list[str]] = {}
    for e in entries:
        if e.get("media") in ("image", "video") and not e.get("missing"):
            groups.setdefault(_round_of(str(e["name"]))[0], []).append(_media(e))
            _mark_shown(e)
    for grp in sorted(groups, key=lambda r: (r is None, r or 0)):
        title = f"round {grp}" if grp is not None else "capture"
        media_html.append(f'<div class="media" data-round="{grp or ""}"><h4>{esc(title)}</h4>'
                          f'{"".join(groups[grp])}</div>')
    kv = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return (f'<div class="agency"><dl class="kv">{kv}</dl>'
            '<table class="small agency-rounds"><thead><tr><th>Round</th><th>Score (0–10)</th>'
            "<th>Criteria</th><th>Feedback sent before the round</th></tr></thead>"
            f'<tbody>{"".join(rounds_html)}</tbody></table>'
            + ("<h4>Rubric</h4>" + "".join(rubric_html) if rubric_html else "")
            + ("<h4>Screenshots and video</h4>" + "".join(media_html) if media_html else "")
            + "".join(f'<p class="na">{esc(p)}</p>' for p in problems) + "</div>")

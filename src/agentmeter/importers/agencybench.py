"""AgencyBench-v2 scenarios as agentmeter scenario directories (design §1, spec §1.2, §2.4).

``import_agencybench(src, dest)`` reads every ``AgencyBench-v2/<Capability>/scenario<N>/
description.json`` under ``src`` (a checkout of GAIR-NLP/AgencyBench or its AgencyBench-v2
directory) and writes one scenario directory per scenario into ``dest``:

    <dest>/suite.toml
    <dest>/<capability>-scenario<N>/task.toml          [[steps]] subtask1..n, [scenario], source
    <dest>/<capability>-scenario<N>/environment/Dockerfile   Debian + the capability's tools
    <dest>/<capability>-scenario<N>/tests/agencybench/description.json   the released file
    <dest>/<capability>-scenario<N>/steps/subtask<k>/instruction.md      the prompt (§2.4)
    <dest>/<capability>-scenario<N>/steps/subtask<k>/tests/rubric.toml   text_judge items
    <dest>/<capability>-scenario<N>/steps/subtask<k>/tests/capture_plan.json   visual only
    <dest>/<capability>-scenario<N>/steps/subtask1/workdir/...           the released assets

Prompt rule (``prompt_mode = "released"``): the raw subtask text; Research 2 sends query +
deliverables only (rubric hidden); Research 3 the Python ``str()`` of the whole object (its
rubric, naming the answers, visible). ``prompt_mode = "query_only"`` sends query + deliverables
for every object-shaped subtask. Rubrics: one ``text_judge`` item per released criterion; a
graded ladder ("Score 10: …", "8 points: …") becomes one judged item scored by the judge's 0–10
(``scoring = "judges"``); a subtask without criteria gets one item built from its deliverables
or text, so no rubric is empty. Visual scenarios (Game, Frontend; spec §3.4) are graded as the
paper grades them: each step gets a capture plan (open ``index.html`` at 1280×1024, wait for the
scenario's selector, record the title and the page's opening HTML, one full-page screenshot) and
every criterion is judged twice, by the text judge and the vision judge (``vision-<id>``), with
``scoring = "judges"``: the step's score is the mean of the two judges' 0–10 scores. Released
assets are copied into the first step's ``workdir/`` when the source tree has them (reported
when it does not). Everything is parsed before anything is written, and the output is written
into a temporary sibling directory renamed to ``dest`` at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentmeter.importers.agencybench_parse import (
    DESCRIPTION_JSON,
    DescriptionError,
    Scenario,
    Subtask,
    read_all,
)
from agentmeter.importers.common import ImportFormatError

PromptMode = Literal["released", "query_only"]
PROMPT_MODES: tuple[PromptMode, ...] = ("released", "query_only")

#: spec §7.3 "Not offline": these need the internet at run time
NEEDS_INTERNET = frozenset({"code-scenario2", "code-scenario3", "code-scenario4",
                            "code-scenario5", "mcp-scenario1", "research-scenario1",
                            "research-scenario4", "research-scenario5"})
#: spec §1.3 "Halting": stop the scenario after a task fails all attempts
HALT_ON_FAIL = frozenset({"code-scenario6", "code-scenario7", "mcp-scenario2",
                          "research-scenario4", "research-scenario5"})
#: spec §1.1 assets: scenario -> (released directory, where it goes in the workdir)
ASSETS: dict[str, tuple[str, str]] = {
    "code-scenario1": ("source", "."), "code-scenario4": ("source", "."),
    "code-scenario5": ("source", "."), "code-scenario6": ("workspace", "."),
    "code-scenario7": ("workspace", "."), "code-scenario9": ("source", "."),
    "mcp-scenario2": ("desktop", "desktop"), "research-scenario1": ("data", "data"),
}
#: MCP 2 also starts with an empty desktop_2/ where the new tree is built
EMPTY_DIRS: dict[str, tuple[str, ...]] = {"mcp-scenario2": ("desktop_2",)}
WORKDIR = "/workspace"
#: capabilities graded by the text and vision judges from a browser capture (spec §0, §3.4)
VISUAL = frozenset({"game", "frontend"})
#: spec §3.4 step 4: the selector the released capture waits for (none for Game 2 and 6)
WAIT_FOR: dict[str, str] = {
    **{f"game-scenario{n}": ".intersection" for n in (1, 4, 5, 8, 10)},
    "frontend-scenario2": ".intersection", "game-scenario3": "#snake-grid, .cell",
    "game-scenario9": ".cell", "game-scenario7": "#jump-stage, .platform",
    "frontend-scenario1": "[data-state], svg", "frontend-scenario3": "#view-3d",
}
#: the released capture's budget per attempt (``SANDBOX_TIMEOUT_SEC``, spec §0)
CAPTURE_TIMEOUT_SEC = 20
#: Debian packages per capability on top of the common ones (python3, git, make, g++)
_PACKAGES = {"backend": "default-jdk-headless", "code": "python3-numpy python3-pandas "
             "python3-scipy python3-venv python3-pip", "research": "python3-pip"}
_LADDER = re.compile(r"^(?:score\s+[0-9]+|[0-9]+\s+points?)\s*:", re.IGNORECASE)
_FORMULA = re.compile(r"^(?:final (?:numeric )?(?:grade|score)\b|scoring\s*:)", re.IGNORECASE)
_WEIGHT = re.compile(r"([0-9]*\.?[0-9]+)\s*\*\s*(Score_[A-Za-z0-9]+)")
_HEAD_WEIGHT = re.compile(r"\(\s*(?:weight\s*)?([0-9]*\.?[0-9]+)\s*(%?)\s*\)", re.IGNORECASE)
_FILEISH = re.compile(r"(?<![\w/.-])((?:/?[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.([A-Za-z0-9]{1,7}))(?![\w/-])")
#: extensions that make a deliverable token a file name (not ``window.app`` or ``GPT-4.1``)
_FILE_EXTS = frozenset({"py", "js", "mjs", "ts", "tsx", "html", "css", "json", "jsonl", "md",
                        "txt", "csv", "tsv", "log", "cpp", "cc", "h", "hpp", "c", "java", "go",
                        "rs", "rb", "sh", "toml", "yaml", "yml", "ini", "cfg", "sql", "xml",
                        "bin", "png", "jpg", "jpeg", "svg", "webm", "mp4", "gif", "parquet",
                        "db", "ipynb", "env"})


@dataclass
class ImportSummary:
    dest: Path
    scenarios: int = 0
    tasks: int = 0
    per_capability: dict[str, tuple[int, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def toml_str(s: str) -> str:
    """A TOML string literal for ``s`` (multi-line literal when that reads better)."""
    if ("\n" in s and "'''" not in s and not s.endswith("'") and "\r" not in s
            and not any(ord(c) < 32 and c not in "\n\t" or ord(c) == 127 for c in s)):
        return "'''\n" + s + "'''"
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 32 or ord(c) == 127:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out) + '"'


def prompt_text(sc: Scenario, st: Subtask, mode: PromptMode) -> tuple[str, str]:
    """(instruction text, the rule used) per spec §2.4."""
    if isinstance(st.raw, str):
        return st.raw, "raw"
    if sc.id == "research-scenario3" and mode == "released":
        return str(st.raw), "python-str-of-object"
    deliverables = "\n".join(st.deliverables)
    if deliverables:
        return f"{st.query}\n\nDeliverables:\n{deliverables}", "query+deliverables"
    return st.query, "query"


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return s[:40].rstrip("-")


def _item_head(text: str) -> str:
    """The ``Name`` of a ``Name: criterion`` bullet ('' when the bullet has none)."""
    head = text.split(":", 1)[0].strip().strip("*").strip() if ":" in text else ""
    return head if 0 < len(head) <= 60 and len(head.split()) <= 8 else ""


def _item_weight(head: str, formula: dict[str, float]) -> float:
    """``Build success (Score_B)`` with ``0.3*Score_B`` in the grade formula -> 0.3;
    ``Determinism (weight 0.35)`` -> 0.35; ``File structure (40%)`` -> 0.4; else 1.0."""
    for key in re.findall(r"Score_[A-Za-z0-9]+", head):
        if key in formula:
            return formula[key]
    m = _HEAD_WEIGHT.search(head)
    if m:
        value = float(m.group(1)) / (100 if m.group(2) else 1)
        if 0 < value <= 1:
            return value
    return 1.0


def judge_inputs(st: Subtask) -> list[str]:
    """Workdir files the deliverables name (what the text judge reads)."""
    found: list[str] = []
    for text in st.deliverables:
        for m in _FILEISH.finditer(text):
            p = re.sub(r"^/?workspace/", "", m.group(1)).lstrip("/")
            if m.group(2).lower() in _FILE_EXTS and p and p not in found:
                found.append(p)
    return found


def capture_plan(sc: Scenario, st: Subtask) -> str:
    """A visual step's ``capture_plan.json``: the released protocol's generic part (spec §3.4
    steps 4 and 6; the per-subtask interactions are hard-coded in the release, not data)."""
    actions: list[dict[str, object]] = [
        {"type": "eval-js", "label": "title", "expression": "document.title"},
        {"type": "eval-js", "label": "html_head",
         "expression": "document.documentElement.outerHTML.slice(0, 2000)"},
        {"type": "screenshot", "name": f"{st.name}.png"},
    ]
    wait = {"wait_for": WAIT_FOR[sc.id]} if sc.id in WAIT_FOR else {}
    plan = {"page": "index.html", "viewport": [1280, 1024], **wait,
            "timeout_sec": CAPTURE_TIMEOUT_SEC, "actions": actions}
    return json.dumps(plan, indent=1) + "\n"


def rubric_toml(sc: Scenario, st: Subtask) -> str:
    """The step's rubric.toml (design §3): released criteria as text_judge items, and for a
    visual scenario as vision_judge items too, scored by the mean of the two judges."""
    items = [i for i in st.rubric_items if not _FORMULA.match(i)]
    notes = [i for i in st.rubric_items if _FORMULA.match(i)]
    weights = {m.group(2): float(m.group(1)) for n in notes for m in _WEIGHT.finditer(n)}
    ladder = bool(items) and all(_LADDER.match(i) for i in items)
    rows: list[tuple[str, str, float]] = []  # (id, description, weight)
    if ladder:
        rows.append(("grade", "Graded rubric (give the 0-10 score of the matching level):\n"
                     + "\n".join(f"- {i}" for i in items), 1.0))
    else:
        seen: Counter[str] = Counter()
        for n, text in enumerate(items, 1):
            head = _item_head(text)
            base = _slug(re.sub(r"\([^)]*\)", "", head)) or f"criterion-{n}"
            seen[base] += 1
            ident = base if seen[base] == 1 else f"{base}-{seen[base]}"
            rows.append((ident, text, _item_weight(head, weights)))
    if not rows:
        basis = "; ".join(st.deliverables) or st.query
        rows.append(("task-complete", "The task is completed as the instruction asks: " + basis,
                     1.0))
    visual = sc.category in VISUAL
    scoring = "judges" if ladder or visual else "items"
    judges = "the text and vision judges (score: their mean)" if visual else "the text judge"
    preamble = [f"# {sc.source}/{st.name}: released criteria, judged by {judges}",
                *(f"# released scoring rule: {n}" for n in notes),
                "[rubric]", f'scoring = "{scoring}"']
    inputs = judge_inputs(st)
    body: list[str] = []
    for ident, text, w in rows:
        body += ["", "[[items]]", f'id = "{ident}"', f"description = {toml_str(text)}",
                 f"weight = {w!r}", 'check = "text_judge"']
        if inputs:
            body.append("inputs = [" + ", ".join(toml_str(p) for p in inputs) + "]")
    if visual:
        for ident, text, w in rows:
            body += ["", "[[items]]", f'id = "vision-{ident}"', f"description = {toml_str(text)}",
                     f"weight = {w!r}", 'check = "vision_judge"']
    return "\n".join(preamble + body) + "\n"


def task_toml(sc: Scenario, rules: list[str], mode: PromptMode) -> str:
    online = sc.id in NEEDS_INTERNET
    lines = [
        f"# AgencyBench {sc.source}: {len(sc.subtasks)} sequential tasks (imported)",
        'schema_version = "1.1"', 'multi_step_reward_strategy = "mean"', "",
        "[metadata]", f'category = "{sc.category}"', f'source = "{sc.source}"',
        'author_name = "GAIR-NLP/AgencyBench (MIT)"',
        f"offline = {'false' if online else 'true'}",
        f'prompt_mode = "{mode}"',
        "# prompt_rule per step: how instruction.md was composed from description.json",
        "prompt_rules = [" + ", ".join(f'"{r}"' for r in rules) + "]", "",
        "[environment]", f'workdir = "{WORKDIR}"',
    ]
    # stated either way: a task that states no network is public (Harbor's default)
    lines.append(f"allow_internet = {'true' if online else 'false'}")
    # agentmeter's own format, as its built-in agency suite: agentmeter's unprivileged account
    lines += ["", "[agent]", "sandbox_account = true"]
    lines += ["", "[verifier]", 'kind = "rubric"', "timeout_sec = 300.0", "",
              "[scenario]", "max_attempts = 2",
              f"halt_on_fail = {'true' if sc.id in HALT_ON_FAIL else 'false'}",
              'feedback = "template"', f'source = "{sc.source}"']
    for st in sc.subtasks:
        lines += ["", "[[steps]]", f'name = "{st.name}"', "", "[steps.agent]",
                  "timeout_sec = 1800.0", "", "[steps.verifier]", "timeout_sec = 300.0"]
    return "\n".join(lines) + "\n"


def dockerfile(sc: Scenario) -> str:
    """A plain Debian environment with the tools the capability's tasks use (the release ran
    on the authors' machines; no image was published)."""
    extra = _PACKAGES.get(sc.category, "")
    return (f"# {sc.source}: imported environment (adjust to the tools your runs need)\n"
            "FROM debian:trixie\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends python3 git make "
            f"g++ ca-certificates curl {extra}".rstrip() + " && rm -rf /var/lib/apt/lists/*\n"
            f"WORKDIR {WORKDIR}\n")


def _copy_tree(src: Path, dst: Path, notes: list[str]) -> int:
    """Copy ``src`` into ``dst`` skipping dot-paths and __pycache__; the number of files. A
    symbolic link is not copied (noted): in a hostile checkout it would bring a host file's
    content into the task; so would ``src`` itself (os.walk lists a linked top)."""
    n = 0
    if src.is_symlink():
        notes.append(f"{src}: a symbolic link, not copied")
        return n
    for dirpath, dirnames, filenames in os.walk(src):
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__"
                             and d not in links)
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in sorted([*filenames, *links]):
            if f.startswith("."):
                continue
            if (Path(dirpath) / f).is_symlink():
                notes.append(f"{Path(dirpath) / f}: a symbolic link, not copied")
                continue
            shutil.copy2(Path(dirpath) / f, dst / rel / f, follow_symlinks=False)
            n += 1
    return n


def write_scenario(sc: Scenario, out: Path, mode: PromptMode, notes: list[str]) -> None:
    rules: list[str] = []
    for st in sc.subtasks:
        step = out / "steps" / st.name
        (step / "tests").mkdir(parents=True)
        text, rule = prompt_text(sc, st, mode)
        rules.append(rule)
        (step / "instruction.md").write_text(text if text.endswith("\n") else text + "\n",
                                             encoding="utf-8")
        (step / "tests" / "rubric.toml").write_text(rubric_toml(sc, st), encoding="utf-8")
        if sc.category in VISUAL:
            (step / "tests" / "capture_plan.json").write_text(capture_plan(sc, st),
                                                              encoding="utf-8")
    (out / "task.toml").write_text(task_toml(sc, rules, mode), encoding="utf-8")
    (out / "environment").mkdir()
    (out / "environment" / "Dockerfile").write_text(dockerfile(sc), encoding="utf-8")
    (out / "tests" / "agencybench").mkdir(parents=True)
    if (sc.path / DESCRIPTION_JSON).is_symlink():
        raise ImportFormatError(f"{sc.path / DESCRIPTION_JSON}: a symbolic link (not followed)")
    shutil.copy2(sc.path / DESCRIPTION_JSON, out / "tests" / "agencybench" / DESCRIPTION_JSON,
                 follow_symlinks=False)
    workdir = out / "steps" / "subtask1" / "workdir"
    if sc.id in ASSETS:
        name, where = ASSETS[sc.id]
        if (sc.path / name).is_dir():
            _copy_tree(sc.path / name, workdir / where, notes)
        else:
            notes.append(f"{sc.source}: asset {name}/ not in the source; "
                         "steps/subtask1/workdir/ left without it")
    for d in EMPTY_DIRS.get(sc.id, ()):
        (workdir / d).mkdir(parents=True, exist_ok=True)


def import_agencybench(src: Path, dest: Path, prompt_mode: PromptMode = "released"
                       ) -> ImportSummary:
    """Parse every scenario under ``src`` then write them all into ``dest`` (which must not
    exist or be empty); nothing is left in ``dest`` when anything fails."""
    if prompt_mode not in PROMPT_MODES:
        raise ImportFormatError(f"unknown prompt mode {prompt_mode!r} "
                                f"({', '.join(PROMPT_MODES)})")
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise ImportFormatError(f"{src}: not a directory")
    scenarios = read_all(src)  # every parse error is raised before anything is written
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ImportFormatError(f"{dest}: already exists and is not an empty directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    summary = ImportSummary(dest=dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        (tmp / "suite.toml").write_text(
            'name = "agencybench"\n'
            f'description = "AgencyBench-v2 (GAIR-NLP/AgencyBench, MIT): {len(scenarios)} '
            'scenarios imported from description.json"\n', encoding="utf-8")
        for sc in scenarios:
            write_scenario(sc, tmp / sc.id, prompt_mode, summary.notes)
            s, t = summary.per_capability.get(sc.category, (0, 0))
            summary.per_capability[sc.category] = (s + 1, t + len(sc.subtasks))
            summary.scenarios += 1
            summary.tasks += len(sc.subtasks)
        if dest.exists():
            dest.rmdir()
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


__all__ = ["DescriptionError", "ImportSummary", "PROMPT_MODES", "PromptMode",
           "import_agencybench", "prompt_text", "rubric_toml", "task_toml", "toml_str"]

"""The agency suite's browser-judged starter scenario (tasks/suites/agency/tictactoe) as data:
every step's plan and rubric agree, and the reference solutions, applied one after another on
one workspace, satisfy every deterministic rubric item in a real capture; the previous step's
files do not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from browser import chromium_fixture  # noqa: F401

from agentmeter.verify.browser import CaptureResult, capture, load_plan

SCENARIO = Path(__file__).resolve().parents[1] / "src/agentmeter/tasks/suites/agency/tictactoe"
STEPS = ["subtask1", "subtask2", "subtask3"]
EVIDENCE_LABEL = re.compile(r"^capture:([A-Za-z0-9_-]+)")

needs_chromium = pytest.mark.usefixtures("chromium")


def _rubric(step: str) -> dict[str, Any]:
    with open(SCENARIO / "steps" / step / "tests" / "rubric.toml", "rb") as f:
        return tomllib.load(f)


def _solve(step: str, app: Path) -> subprocess.CompletedProcess[str]:
    script = SCENARIO / "steps" / step / "solution" / "solve.sh"
    return subprocess.run(["bash", str(script)], env={**os.environ, "APP_DIR": str(app)},
                          capture_output=True, text=True, timeout=60)


def _unmet(step: str, result: CaptureResult) -> list[str]:
    """The rubric's capture items the capture does not satisfy (ids)."""
    bad = []
    for item in _rubric(step)["items"]:
        if item["check"] != "capture":
            continue
        value = result.labels.get(item["label"], "<missing>")
        ok = value == item["equals"] if "equals" in item else item["contains"] in json.dumps(value)
        if not ok:
            bad.append(f"{item['id']}: {item['label']} = {value!r}")
    return bad


def test_the_scenario_is_laid_out_as_designed() -> None:
    with open(SCENARIO / "task.toml", "rb") as f:
        task = tomllib.load(f)
    assert [s["name"] for s in task["steps"]] == STEPS
    assert task["scenario"]["max_attempts"] == 2 and task["metadata"]["category"] == "game"
    for step in STEPS:
        d = SCENARIO / "steps" / step
        assert (d / "instruction.md").read_text().strip()
        assert os.access(d / "solution" / "solve.sh", os.X_OK)


@pytest.mark.parametrize("step", STEPS)
def test_each_rubric_names_only_what_its_plan_records(step: str) -> None:
    plan = load_plan(SCENARIO / "steps" / step / "tests" / "capture_plan.json")
    items = _rubric(step)["items"]
    assert _rubric(step)["rubric"]["scoring"] == "judges"  # the paper's rule for visual tasks (App. A.2)
    checks = [i["check"] for i in items]
    assert checks.count("text_judge") == 1 and checks.count("vision_judge") == 1
    assert checks.count("capture") >= 5
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        if item["check"] == "capture":
            assert item["label"] in plan.labels, item["id"]
        if "evidence" in item:
            m = EVIDENCE_LABEL.match(item["evidence"])
            assert m and m.group(1) in plan.labels, item["id"]
    assert plan.screenshots, "the vision judge needs a screenshot"


def test_a_step_refuses_to_run_without_the_previous_steps_files(tmp_path: Path) -> None:
    r = _solve("subtask2", tmp_path)
    assert r.returncode != 0 and "builds on step 1" in r.stderr


@needs_chromium
async def test_reference_solutions_satisfy_their_rubrics_step_after_step(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    for n, step in enumerate(STEPS, 1):
        r = _solve(step, app)
        assert r.returncode == 0, r.stderr
        plan = load_plan(SCENARIO / "steps" / step / "tests" / "capture_plan.json")
        out = tmp_path / f"capture-{n}"
        result = await capture(app, plan, out, timeout_s=120)
        assert not result.timed_out and result.diagnostics["errors"] == [], result.diagnostics
        assert _unmet(step, result) == []
        assert [p.name for p in result.screenshots] == plan.screenshots
        if n == 1:  # the previous step's files must not pass the next step's rubric
            early = await capture(app, load_plan(SCENARIO / "steps/subtask2/tests/capture_plan.json"),
                                  tmp_path / "early", timeout_s=120)
            total = sum(1 for i in _rubric("subtask2")["items"] if i["check"] == "capture")
            assert len(_unmet("subtask2", early)) > total * 0.6, _unmet("subtask2", early)

"""The AgencyBench importer on the released description.json files (tests/data/agencybench):
counts, the three shapes, the prompt rule, rubric files, assets, network marking, malformed
input and atomic output. Real files and a real ``agentmeter`` process; no doubles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentmeter.importers.agencybench import import_agencybench, toml_str
from agentmeter.importers.agencybench_parse import DescriptionError, read_all, read_scenario
from agentmeter.importers.common import ImportFormatError

FIXTURE = Path(__file__).resolve().parent / "data" / "agencybench"
V2 = FIXTURE / "AgencyBench-v2"
# spec §0 (paper Table 6 = repository)
PER_CAPABILITY = {"game": (10, 50), "frontend": (3, 15), "backend": (3, 15), "code": (9, 29),
                  "research": (5, 19), "mcp": (2, 10)}
ONLINE = {"code-scenario2", "code-scenario3", "code-scenario4", "code-scenario5",
          "mcp-scenario1", "research-scenario1", "research-scenario4", "research-scenario5"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agencybench") / "suite"
    import_agencybench(FIXTURE, out)
    return out


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _raw(capability: str, n: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (V2 / capability / f"scenario{n}" / "description.json").read_text(encoding="utf-8"))
    return data


def _fixture_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "src"
    shutil.copytree(FIXTURE, dst)
    return dst


# --- counts and structure --------------------------------------------------------------------

def test_fixture_imports_as_32_scenarios_and_138_tasks(tmp_path: Path) -> None:
    summary = import_agencybench(FIXTURE, tmp_path / "out")
    assert (summary.scenarios, summary.tasks) == (32, 138)
    assert summary.per_capability == PER_CAPABILITY
    dirs = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert len(dirs) == 32 and "game-scenario4" in dirs and "mcp-scenario2" in dirs
    assert sum(len(_toml(tmp_path / "out" / d / "task.toml")["steps"]) for d in dirs) == 138


def test_every_scenario_has_the_design_layout(imported: Path) -> None:
    for scen in sorted(p for p in imported.iterdir() if p.is_dir()):
        cfg = _toml(scen / "task.toml")
        steps = [s["name"] for s in cfg["steps"]]
        assert steps == [f"subtask{k}" for k in range(1, len(steps) + 1)], scen
        assert sorted(p.name for p in (scen / "steps").iterdir()) == sorted(steps)
        assert cfg["schema_version"] == "1.1" and cfg["verifier"]["kind"] == "rubric"
        assert cfg["scenario"]["max_attempts"] == 2
        assert cfg["scenario"]["feedback"] == "template"
        cap, n = scen.name.split("-scenario")
        assert cfg["metadata"]["category"] == cap
        assert cfg["scenario"]["source"].lower() == f"agencybench-v2/{cap}/scenario{n}"
        assert (scen / "environment" / "Dockerfile").read_text().startswith("# AgencyBench")
        assert (scen / "tests" / "agencybench" / "description.json").read_bytes() == (
            V2 / cfg["scenario"]["source"].split("/", 1)[1] / "description.json").read_bytes()
        assert len(cfg["metadata"]["prompt_rules"]) == len(steps)
        for step in steps:
            assert (scen / "steps" / step / "instruction.md").read_text().strip()
            rubric = _toml(scen / "steps" / step / "tests" / "rubric.toml")
            items = rubric["items"]
            assert items, f"{scen.name}/{step}: empty rubric"
            assert rubric["rubric"]["scoring"] in ("items", "judges")
            plan = scen / "steps" / step / "tests" / "capture_plan.json"
            if cap in ("game", "frontend"):  # the paper: text and vision judges, their mean
                assert {i["check"] for i in items} == {"text_judge", "vision_judge"}
                text = [i for i in items if i["check"] == "text_judge"]
                assert [i["id"] for i in items if i["check"] == "vision_judge"] == [
                    f"vision-{i['id']}" for i in text]
                assert rubric["rubric"]["scoring"] == "judges"
                assert json.loads(plan.read_text())["actions"][-1]["type"] == "screenshot"
            else:
                assert {i["check"] for i in items} == {"text_judge"} and not plan.exists()
            ids = [i["id"] for i in items]
            assert len(set(ids)) == len(ids)
            assert all(i["description"].strip() and i["weight"] > 0 for i in items)


def test_network_needing_scenarios_are_marked(imported: Path) -> None:
    for scen in (p for p in imported.iterdir() if p.is_dir()):
        cfg = _toml(scen / "task.toml")
        online = scen.name in ONLINE
        assert cfg["environment"].get("allow_internet", False) is online, scen.name
        assert cfg["metadata"]["offline"] is (not online), scen.name


def test_halt_on_fail_follows_the_released_runners(imported: Path) -> None:
    halting = {p.name for p in imported.iterdir() if p.is_dir()
               and _toml(p / "task.toml")["scenario"]["halt_on_fail"]}
    assert halting == {"code-scenario6", "code-scenario7", "mcp-scenario2",
                       "research-scenario4", "research-scenario5"}


# --- the three shapes ------------------------------------------------------------------------

def test_sectioned_text_backend1(imported: Path) -> None:
    raw = _raw("Backend", 1)["subtask1"]
    st = read_scenario(V2 / "Backend" / "scenario1" / "description.json").subtasks[0]
    assert st.shape == "sections" and st.raw == raw
    assert st.query.startswith("Build the baseline CLI login/registration layer")
    assert st.query.endswith("the same account logged in again.")
    assert [d.split(":")[0] for d in st.deliverables] == [
        "`Makefile`", "`src/main.cpp` & `src/auth.cpp`", "`data/users.json`",
        "`logs/session_state.json`"]
    assert [r.split(":")[0] for r in st.rubric_items] == [
        "Build success (Score_B)", "Persistence verification (Score_P)",
        "Menu semantics (Score_M)",
        "Final numeric grade = round(10 * (0.3*Score_B + 0.5*Score_P + 0.2*Score_M))."]
    step = imported / "backend-scenario1" / "steps" / "subtask1"
    # the raw text is the prompt: the rubric is visible to the agent (spec §2.4)
    assert (step / "instruction.md").read_text() == raw + "\n"
    rubric = _toml(step / "tests" / "rubric.toml")
    assert [(i["id"], i["weight"]) for i in rubric["items"]] == [
        ("build-success", 0.3), ("persistence-verification", 0.5), ("menu-semantics", 0.2)]
    assert rubric["items"][0]["description"] == st.rubric_items[0]
    assert "src/main.cpp" in rubric["items"][0]["inputs"]
    assert "released scoring rule: Final numeric grade" in (step / "tests" /
                                                            "rubric.toml").read_text()


def test_sectioned_text_frontend3_deliverables_header_variant() -> None:
    st = read_scenario(V2 / "Frontend" / "scenario3" / "description.json").subtasks[1]
    assert st.shape == "sections"
    assert len(st.deliverables) == 2 and st.deliverables[0].startswith("Continue shipping")
    assert [r.split(":")[0] for r in st.rubric_items] == ["Toggle handling", "Planet focus",
                                                          "Status text"]


def test_object_research2_rubric_hidden(imported: Path) -> None:
    raw = _raw("Research", 2)["subtask1"]
    st = read_scenario(V2 / "Research" / "scenario2" / "description.json").subtasks[0]
    assert st.shape == "object" and st.query == raw["query"]
    assert st.deliverables == [raw["deliverables"]]
    assert [r.split(":")[0] for r in st.rubric_items] == ["0 points", "5 points", "8 points",
                                                          "10 points"]
    step = imported / "research-scenario2" / "steps" / "subtask1"
    text = (step / "instruction.md").read_text()
    assert text == f"{raw['query']}\n\nDeliverables:\n{raw['deliverables']}\n"
    assert "Paul George" not in text  # the answer-bearing rubric stays hidden
    rubric = _toml(step / "tests" / "rubric.toml")
    assert rubric["rubric"]["scoring"] == "judges"
    [grade] = rubric["items"]
    assert "Paul George" in grade["description"] and grade["inputs"] == ["subtask1.md"]


def test_object_research3_prompt_modes(tmp_path: Path, imported: Path) -> None:
    raw = _raw("Research", 3)["subtask1"]
    st = read_scenario(V2 / "Research" / "scenario3" / "description.json").subtasks[0]
    assert st.deliverables == raw["deliverables"] and len(st.rubric_items) == 3
    released = (imported / "research-scenario3" / "steps" / "subtask1" / "instruction.md")
    assert released.read_text() == str(raw) + "\n"  # released: the whole dict, rubric shown
    assert "UnitedHealth" in released.read_text()
    import_agencybench(FIXTURE, tmp_path / "q", prompt_mode="query_only")
    hidden = (tmp_path / "q" / "research-scenario3" / "steps" / "subtask1" / "instruction.md")
    assert "UnitedHealth" not in hidden.read_text()
    assert hidden.read_text().startswith(raw["query"] + "\n\nDeliverables:\n")
    assert _toml(tmp_path / "q" / "research-scenario3" / "task.toml")["metadata"][
        "prompt_mode"] == "query_only"


def test_free_text_acceptance_criteria_code8() -> None:
    raw = _raw("Code", 8)["subtask1"]
    st = read_scenario(V2 / "Code" / "scenario8" / "description.json").subtasks[0]
    assert st.shape == "text" and st.query == raw.strip() and st.deliverables == []
    assert st.rubric_items == [
        "FastAPI server starts successfully without errors",
        "MongoDB connection is established with connection pooling",
        "Environment variables are loaded correctly from .env file",
        'Health check endpoint returns 200 with JSON containing status: "ok" when MongoDB '
        "is connected",
        "Health check endpoint returns appropriate error when MongoDB is unavailable"]


def test_free_text_requirements_with_escaped_newlines_mcp2(imported: Path) -> None:
    raw = _raw("MCP", 2)["subtask1"]
    assert "\n" not in raw and "\\n" in raw  # released with literal backslash-n
    st = read_scenario(V2 / "MCP" / "scenario2" / "description.json").subtasks[0]
    assert st.rubric_items == [
        "Create `workspace_v2` inside `desktop_2`.",
        "Under `workspace_v2` create `dev_bundle/tests`, `dev_bundle/source`, "
        "`data_warehouse/legacy_archives`, `data_warehouse/active_datasets`, and "
        "`knowledge_base`.",
        "Confirm the directory tree matches the specification above before continuing."]
    assert (imported / "mcp-scenario2" / "steps" / "subtask1" / "instruction.md"
            ).read_text() == raw + "\n"


def test_free_text_without_criteria_gets_one_item(imported: Path) -> None:
    st = read_scenario(V2 / "Code" / "scenario2" / "description.json").subtasks[0]
    assert st.shape == "text" and st.rubric_items == []
    [item] = _toml(imported / "code-scenario2" / "steps" / "subtask1" / "tests" /
                   "rubric.toml")["items"]
    assert item["id"] == "task-complete" and "Qdrant" in item["description"]


def test_parsed_items_equal_the_bullets_of_every_sectioned_rubric() -> None:
    """Shape 1 across the release: every ``- `` line of the Rubric section starts an item."""
    for sc in read_all(FIXTURE):
        for st in sc.subtasks:
            if st.shape != "sections":
                continue
            assert isinstance(st.raw, str)
            section = st.raw.split("\nRubric:", 1)[1]
            bullets = [ln for ln in section.split("\n") if ln.startswith("- ")]
            assert len(st.rubric_items) == len(bullets), f"{sc.source}/{st.name}"


# --- assets ----------------------------------------------------------------------------------

def test_assets_are_copied_into_the_first_step_workdir(tmp_path: Path) -> None:
    src = _fixture_copy(tmp_path)
    (src / "AgencyBench-v2" / "MCP" / "scenario2" / "desktop" / ".DS_Store").write_bytes(b"x")
    summary = import_agencybench(src, tmp_path / "out")
    work = tmp_path / "out" / "mcp-scenario2" / "steps" / "subtask1" / "workdir"
    released = src / "AgencyBench-v2" / "MCP" / "scenario2" / "desktop"
    files = sorted(p.relative_to(released) for p in released.rglob("*")
                   if p.is_file() and p.name != ".DS_Store")
    assert len(files) == 16
    assert sorted(p.relative_to(work / "desktop") for p in (work / "desktop").rglob("*")
                  if p.is_file()) == files
    for f in files:
        assert (work / "desktop" / f).read_bytes() == (released / f).read_bytes()
    assert (work / "desktop_2").is_dir() and not any((work / "desktop_2").iterdir())
    data = tmp_path / "out" / "research-scenario1" / "steps" / "subtask1" / "workdir" / "data"
    assert sorted(p.name for p in data.iterdir()) == [f"test_data_{i}.json" for i in (1, 2, 3)]
    # assets the fixture leaves out are reported, not invented
    assert any("Code/scenario1: asset source/" in n for n in summary.notes)
    assert not (tmp_path / "out" / "code-scenario1" / "steps" / "subtask1" / "workdir").exists()


# --- malformed input and atomic output -------------------------------------------------------

@pytest.mark.parametrize(("content", "key", "message"), [
    ("{not json", None, "invalid JSON"),
    ('{"subtask1": "x"}', "subtask_count", "expected a positive integer"),
    ('{"subtask_count": 3, "subtask1": "a", "subtask2": "b"}', "subtask3", "missing"),
    ('{"subtask_count": 1, "subtask1": ["a"]}', "subtask1", "expected a string or an object"),
    ('{"subtask_count": 1, "subtask1": {"query": "q", "deliverables": 3, "rubric": "r"}}',
     "subtask1.deliverables", "expected a string or a list of strings"),
    ('{"subtask_count": 1, "subtask1": {"deliverables": "d"}}', "subtask1.query",
     "expected a non-empty string"),
    ('{"subtask_count": 1, "subtask1": "a", "subtask2": "b"}', "subtask2",
     "beyond subtask_count"),
])
def test_malformed_description_names_file_and_key(tmp_path: Path, content: str,
                                                  key: str | None, message: str) -> None:
    src = _fixture_copy(tmp_path)
    bad = src / "AgencyBench-v2" / "Game" / "scenario4" / "description.json"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(DescriptionError) as err:
        import_agencybench(src, tmp_path / "out")
    text = str(err.value)
    assert text.startswith(f"{bad}: ") and message in text and "\n" not in text
    assert err.value.key == key and err.value.file == bad
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temporary directory left


def test_a_failure_while_writing_leaves_nothing(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    src = _fixture_copy(tmp_path)
    # an asset that cannot be copied: the failure comes after most scenarios were written
    bad = src / "AgencyBench-v2" / "MCP" / "scenario2" / "desktop" / "unreadable.txt"
    bad.write_text("x")
    copy2 = shutil.copy2

    def failing(s: Any, d: Any, **kw: Any) -> Any:
        if Path(s) == bad:
            raise PermissionError(13, "Permission denied", str(s))
        return copy2(s, d, **kw)
    monkeypatch.setattr(shutil, "copy2", failing)
    with pytest.raises(OSError):
        import_agencybench(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_links_in_a_hostile_checkout_bring_no_host_file(tmp_path: Path) -> None:
    """Security review finding 8: an asset that is a link to a host file had that file's
    content copied into the task (and on into the sandbox)."""
    src = _fixture_copy(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    desktop = src / "AgencyBench-v2" / "MCP" / "scenario2" / "desktop"
    os.symlink(secret, desktop / "notes.txt")
    os.symlink(tmp_path, desktop / "linked_dir")
    summary = import_agencybench(src, tmp_path / "out")
    out = tmp_path / "out" / "mcp-scenario2"
    assert not [p for p in out.rglob("*") if p.is_file() and b"host secret" in p.read_bytes()]
    assert not [p for p in out.rglob("*") if p.is_symlink()]
    assert any("notes.txt: a symbolic link" in n for n in summary.notes)
    scen = src / "AgencyBench-v2" / "MCP" / "scenario2"
    (scen / "description.json").rename(tmp_path / "description.json")
    os.symlink(tmp_path / "description.json", scen / "description.json")
    with pytest.raises(ImportFormatError, match="symbolic link"):
        import_agencybench(src, tmp_path / "out2")
    # security review 3: the asset directory itself a link (os.walk lists a linked top)
    from agentmeter.importers.agencybench import _copy_tree

    (tmp_path / "hostdir").mkdir()
    (tmp_path / "hostdir" / "id_rsa").write_text("host secret\n")
    os.symlink(tmp_path / "hostdir", tmp_path / "desktop")
    notes: list[str] = []
    assert _copy_tree(tmp_path / "desktop", tmp_path / "out3", notes) == 0
    assert not (tmp_path / "out3" / "id_rsa").exists()
    assert any("desktop: a symbolic link" in n for n in notes)


def test_an_existing_destination_is_refused_untouched(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(ImportFormatError, match="already exists"):
        import_agencybench(FIXTURE, dest)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert import_agencybench(FIXTURE, empty).scenarios == 32


def test_not_an_agencybench_tree(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="not an AgencyBench checkout"):
        import_agencybench(tmp_path, tmp_path / "out")


@pytest.mark.parametrize("text", ["plain", 'say "hi"\\n', "a\nb'''c", "ends with '\nquote'",
                                  "tab\tand\r\nCRLF", "ctl\x01\x7f", "\n", "multi\nline ok"])
def test_toml_strings_round_trip(text: str) -> None:
    assert tomllib.loads(f"v = {toml_str(text)}\n")["v"] == text


# --- the command line ------------------------------------------------------------------------

@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli(*args: str) -> Ran:
    """``agentmeter tasks import ARGS`` in this process (typer's runner; a Python start per
    call cost seconds on a loaded machine); an exception escaping the CLI is put in stderr as
    a traceback would be."""
    from typer.testing import CliRunner

    from agentmeter.cli import app

    res = CliRunner().invoke(app, ["tasks", "import", *args])
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "Traceback (escaped the CLI): " + repr(res.exception)
    return Ran(res.exit_code, res.stdout, err)


def test_cli_imports_and_reports_counts(tmp_path: Path) -> None:
    done = _cli(str(FIXTURE), str(tmp_path / "out"), "--format", "agencybench", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["scenarios"], report["tasks"]) == (32, 138)
    assert report["per_capability"]["game"] == {"scenarios": 10, "tasks": 50}
    assert (tmp_path / "out" / "game-scenario1" / "task.toml").is_file()


def test_cli_malformed_file_is_one_line(tmp_path: Path) -> None:
    src = _fixture_copy(tmp_path)
    bad = src / "AgencyBench-v2" / "Research" / "scenario2" / "description.json"
    data = json.loads(bad.read_text())
    data["subtask4"] = 7
    bad.write_text(json.dumps(data))
    done = _cli(str(src), str(tmp_path / "out"))
    assert done.returncode != 0
    # one message (rich folds long lines of a non-terminal stderr at 160 columns)
    assert " ".join(done.stderr.split()) == (
        f"error: {bad}: subtask4: expected a string or an object with "
        "query/deliverables/rubric, got int")
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    # `python -m agentmeter` itself, once (the other calls run in this process)
    wrong = subprocess.run([sys.executable, "-m", "agentmeter", "tasks", "import", str(src),
                            str(tmp_path / "o2"), "--format", "harbor"], capture_output=True,
                           text=True, timeout=300, check=False)
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr, wrong.stderr


# --- the scenario loader ---------------------------------------------------------------------


def test_imported_suite_loads_with_the_task_loader(imported: Path) -> None:
    from agentmeter.tasks.suite import load_suite

    suite = load_suite(imported)
    assert len(suite.tasks) == 138
    assert len({t.scenario.id for t in suite.tasks if t.scenario}) == 32
    task = next(t for t in suite.tasks if t.id == "game-scenario4.subtask2")
    assert task.scenario is not None and task.scenario.id == "game-scenario4"
    assert task.scenario_position == 2 and task.scenario.max_attempts == 2
    assert task.verifier_kind == "rubric" and task.pass_threshold == 0.6


# --- graded as the paper grades them, with the scripted judge ----------------------------------


def _scripted_score(task: Any, work: Path) -> float:
    """The step's 0-10 score under the scripted judge, as the rubric verifier computes it, for
    a working directory ``work`` (no capture: a quitter's page has nothing to show)."""
    from agentmeter.gateway.scripted.rubric import answer
    from agentmeter.verify.rubric import judging
    from agentmeter.verify.rubric.checks import Deliverables
    from agentmeter.verify.rubric.config import Check
    from agentmeter.verify.rubric.verifier import rubric_of, seeds_of

    rubric, _ = rubric_of(task)
    inputs = judging.JudgeInputs(task_id=task.id, instruction=task.instruction, checks=[],
                                 deliverables=Deliverables(work, seeds=seeds_of(task)))
    scores, met = [], 0.0
    kinds: tuple[tuple[judging.JudgeKind, Check], ...] = (("text", "text_judge"),
                                                          ("vision", "vision_judge"))
    for kind, check in kinds:
        items = rubric.judged(check)
        if items:
            text = judging.prompt(kind, items, inputs)[1].content[0]
            assert isinstance(text, str)
            got = judging.parse_reply(kind, answer("normalized", text), items,
                                      rubric.rubric.scoring)
            assert got is not None
            scores.append(got.score)
            met += sum(i.weight for i in items if got.items[i.id][0])
    if rubric.rubric.scoring == "judges":
        return sum(scores) / len(scores)
    return 10 * met / sum(i.weight for i in rubric.items)


@pytest.fixture(scope="module")
def loaded(imported: Path) -> Any:
    from agentmeter.tasks.suite import load_suite

    return load_suite(imported)


def test_a_quitter_passes_no_imported_scenario(loaded: Any, tmp_path: Path) -> None:
    """The agent does nothing: its working directory holds what the steps seeded (the released
    assets) and nothing else; the first step of every scenario, and every step of MCP 2 (which
    scored 10/10 on all five), stay below the pass threshold."""
    suite = loaded
    for task in suite.tasks:
        if task.scenario_position != 1 and not task.id.startswith("mcp-scenario2."):
            continue
        work = tmp_path / task.id
        work.mkdir()
        for earlier in suite.tasks:  # the quitter's workspace: every step's seed so far
            if earlier.scenario == task.scenario and earlier.step_workdir is not None and \
                    (earlier.scenario_position or 0) <= (task.scenario_position or 0):
                shutil.copytree(earlier.step_workdir, work, dirs_exist_ok=True)
        score = _scripted_score(task, work)
        assert score / 10 < task.pass_threshold, (task.id, score)


def test_directories_the_agent_makes_are_evidence(loaded: Any, tmp_path: Path) -> None:
    """MCP 2 step 1 asks for a directory tree: made, it is judged met (was: regular files only
    shown, a correct agent scored 0); the released desktop alone scores 0."""
    task = next(t for t in loaded.tasks if t.id == "mcp-scenario2.subtask1")
    assert task.step_workdir is not None
    work = tmp_path / "w"
    shutil.copytree(task.step_workdir, work)
    assert _scripted_score(task, work) == 0
    for d in ("dev_bundle/tests", "dev_bundle/source", "data_warehouse/legacy_archives",
              "data_warehouse/active_datasets", "knowledge_base"):
        (work / "desktop_2" / "workspace_v2" / d).mkdir(parents=True)
    assert _scripted_score(task, work) == 10

"""Plug-ins from outside the source tree (docs/plugins.md), with the page's own examples.

Every file of docs/plugins.md's examples is copied out of the page into a temporary directory
outside agentmeter's tree, which goes on ``sys.path`` (the entry points: a ``*.dist-info``
directory there, not a pip install). Then: the agent file, the ``module:Class`` agent and the
entry-point agent pass a starter task that ``nop`` fails (local backend, scripted model); a
verifier kind and a metric from that directory work with no agentmeter file touched; every
broken plug-in is one clear message naming it.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmeter.agents.cli import DEFINITIONS, InstalledCliAgent
from agentmeter.agents.registry import UnknownAgentError, make_agent
from agentmeter.cli.app import app
from agentmeter.plugins import PluginError
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, RunSetupError, prepare, run
from agentmeter.store.db import Store
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.native import load_native_task
from agentmeter.tasks.suite import load_suites

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
TASK = "log-level-counts"
_BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.M | re.S)
_MODULES = ("hello_plugin", "exit_status", "solved_tasks")


def doc_files(into: Path) -> list[str]:
    """Write every ``file=`` block of docs/plugins.md under ``into``; their paths."""
    names = []
    for name, text in _BLOCK.findall(DOC.read_text()):
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_text(text)
        names.append(name)
    return names


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("outside")
    assert not d.resolve().is_relative_to(DOC.parents[1])
    names = doc_files(d)
    assert {"hello-agent/agent.toml", "hello-agent/hello.py", "hello_plugin.py", "exit_status.py",
            "solved_tasks.py", "hello_plugins-1.0.dist-info/entry_points.txt"} <= set(names)
    sys.path.insert(0, str(d))
    importlib.invalidate_caches()
    try:
        yield d
    finally:
        sys.path.remove(str(d))
        for m in _MODULES:
            sys.modules.pop(m, None)


def _exit_status_task(into: Path, kind: str) -> Path:
    """The starter task with a test script whose exit status is the verdict, verified by
    ``kind``."""
    src = load_suites(["starter"]).select(None, [TASK])[0].path
    task = into / f"exit-{re.sub(r'[^a-z]', '', kind)}"
    shutil.copytree(src, task)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\nexec python3 -I /tests/check.py\n")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", f'[verifier]\nkind = "{kind}"\n'))
    return task


@pytest.mark.slow
async def test_outside_agents_pass_where_nop_fails_and_a_metric_reads_them(
        plugin_dir: Path, tmp_path: Path) -> None:
    agent_file = str(plugin_dir / "hello-agent" / "agent.toml")
    store = Store.open(tmp_path / "runs")
    req = RunRequest(suites=["starter"], task_ids=[TASK], models=["scripted/solver"],
                     agents=[agent_file, "hello_plugin:HelloAgent", "hello", "nop"],
                     concurrency=2, max_infra_retries=0)
    rid, _ = await run(store, prepare(req))
    by_agent = {c.id: c.agent.name for c in store.run_configs(rid)}
    trials = {by_agent[t.config_id]: t for t in store.latest_completed_trials(rid)}
    for name in (agent_file, "hello_plugin:HelloAgent", "hello"):
        t = trials[name]
        assert t.status is TrialStatus.PASSED, (name, t.status, t.error)
        assert t.model_calls >= 2, t
    assert trials["nop"].status is TrialStatus.FAILED

    # the doc's metric, by import path and by entry point; the JSON keyed by the name given
    for name in ("solved_tasks:solved", "solved"):
        r = CliRunner().invoke(app, ["score", rid, "--metric", name, "--json",
                                     "--store", str(tmp_path / "runs")])
        assert r.exit_code == 0, r.output
        solved = json.loads(r.output)[name]["by_config"]
        assert sorted(len(v) for v in solved.values()) == [0, 1, 1, 1], solved


@pytest.mark.slow
async def test_outside_verifier_kind_decides_with_no_agentmeter_file_touched(
        plugin_dir: Path, tmp_path: Path) -> None:
    by_path = _exit_status_task(tmp_path, "exit_status:ExitStatusVerifier")
    by_entry_point = _exit_status_task(tmp_path, "exit-status")
    assert load_native_task(by_path).verifier_kind == "exit_status:ExitStatusVerifier"
    store = Store.open(tmp_path / "runs")
    req = RunRequest(suites=[str(by_entry_point)], agents=["oracle", "nop"], max_infra_retries=0)
    rid, _ = await run(store, prepare(req))
    by_agent = {c.id: c.agent.name for c in store.run_configs(rid)}
    trials = {by_agent[t.config_id]: t for t in store.latest_completed_trials(rid)}
    assert trials["oracle"].status is TrialStatus.PASSED, trials["oracle"].error
    assert trials["nop"].status is TrialStatus.FAILED


def _agent_file(tmp_path: Path, body: str) -> str:
    f = tmp_path / "a" / "agent.toml"
    f.parent.mkdir(exist_ok=True)
    f.write_text(body)
    return str(f)


GOOD = 'name = "x"\nversion = "1"\nwire_api = "chat"\ncommand = "echo hi"\n'


@pytest.mark.parametrize(("body", "says"), [
    (GOOD.replace('command = "echo hi"\n', ""), "command: Field required"),
    (GOOD + 'parser = "nosuch"\n', "parser: unknown parser 'nosuch'"),
    (GOOD.replace("echo hi", "echo ${prompts}"), "command: unknown placeholder ${prompts}"),
    (GOOD + 'install = ["cp x ${model}"]\n', "install: unknown placeholder ${model}"),
    (GOOD + "colour = 1\n", "colour: Extra inputs are not permitted"),
    (GOOD + 'package = "p"\n', "'package' is installed by runtime node or python"),
    (GOOD + "name = 2\n", "Cannot overwrite a value"),
])
def test_a_broken_agent_file_is_named_with_what_is_wrong(tmp_path: Path, body: str,
                                                          says: str) -> None:
    path = _agent_file(tmp_path, body)
    with pytest.raises(ValueError) as e:
        make_agent(path)
    assert str(e.value).startswith(f"agent file {path}") or str(e.value).startswith(path), e.value
    assert says in str(e.value)


def test_agent_file_layers_and_command(tmp_path: Path) -> None:
    path = _agent_file(tmp_path, GOOD + 'install = ["echo ${version} > ${install}/v"]\n'
                       'install_user = "agent"\n')
    agent = make_agent(path, "2")
    assert (agent.name, agent.version) == ("x", "2")
    [layer] = agent.layers()
    assert "echo 2 > /opt/agentmeter/x-2/v" in layer.source and "setpriv" in layer.source
    # without a build context the commands run in /: nothing there is made readable
    assert layer.context is None and "chmod -R a+rX .\n" not in layer.source
    assert make_agent(_agent_file(tmp_path, GOOD)).layers() == []


def test_broken_import_paths_and_entry_points_are_one_clear_message(
        plugin_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "not_an_agent.py").write_text("class Thing:\n    def __init__(self, v, o): pass\n")
    dist = tmp_path / "twice-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: twice\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentmeter.agents]\nhello = other:Agent\n"
                                           "gone = hello_plugin:Gone\n")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        cases = {
            "nosuch_mod:Agent": "agent 'nosuch_mod:Agent': no module named 'nosuch_mod' on the "
                                "Python path",
            "hello_plugin:HelloAgnet": "module 'hello_plugin' has no attribute 'HelloAgnet'",
            "broken_plugin:A": "importing 'broken_plugin' failed: RuntimeError: boom at import",
            "not_an_agent:Thing": "Thing does not implement the Agent protocol (missing: name, "
                                  "version, uses_model, layers, run)",
            "hello": "offered by more than one package (hello-plugins 1.0: "
                     "hello_plugin:HelloAgent; twice 1.0: other:Agent)",
            "gone": "entry point gone = 'hello_plugin:Gone' (group 'agentmeter.agents', "
                    "package twice 1.0)",
        }
        for name, says in cases.items():
            with pytest.raises(PluginError) as e:
                make_agent(name)
            assert says in str(e.value), (name, str(e.value))
            assert "\n" not in str(e.value)
        with pytest.raises(UnknownAgentError, match="unknown agent 'nosuch'.*agent file"):
            make_agent("nosuch")
        # through the command line: one line, no traceback
        r = CliRunner().invoke(app, ["run", "-a", "broken_plugin:A", "-t", TASK,
                                     "--store", str(tmp_path / "runs")])
        assert r.exit_code != 0 and "boom at import" in r.output, r.output
        assert "Traceback" not in r.output
        with pytest.raises(RunSetupError, match="unknown sandbox backend 'nosuch'"):
            prepare(RunRequest(task_ids=[TASK], backend="nosuch"))
        with pytest.raises(RunSetupError, match="sandbox backend 'nosuch_mod:f': no module"):
            prepare(RunRequest(task_ids=[TASK], backend="nosuch_mod:f"))
    finally:
        sys.path.remove(str(tmp_path))
        for m in ("broken_plugin", "not_an_agent"):
            sys.modules.pop(m, None)


def test_task_loading_names_a_verifier_kind_that_is_not_there(plugin_dir: Path,
                                                             tmp_path: Path) -> None:
    for kind, says in (("exit_status:Gone", "module 'exit_status' has no attribute 'Gone'"),
                       ("no-such-kind", "unknown verifier kind 'no-such-kind'")):
        task = _exit_status_task(tmp_path, kind)
        with pytest.raises(TaskError) as e:
            load_native_task(task)
        assert says in str(e.value) and "verifier.kind" in str(e.value), str(e.value)
    # a plug-in kind's own default threshold is the task's when it gives none
    assert load_native_task(_exit_status_task(tmp_path, "exit-status")).pass_threshold == 1.0


def test_plugins_command_lists_what_is_installed_and_where_from(plugin_dir: Path) -> None:
    r = CliRunner().invoke(app, ["plugins", "--json", "--load"])
    assert r.exit_code == 0, r.output
    mine = [p for p in json.loads(r.output) if p["distribution"] == "hello-plugins 1.0"]
    assert {(p["group"], p["name"], p["value"]) for p in mine} == {
        ("agentmeter.agents", "hello", "hello_plugin:HelloAgent"),
        ("agentmeter.verifiers", "exit-status", "exit_status:ExitStatusVerifier"),
        ("agentmeter.metrics", "solved", "solved_tasks:solved")}
    assert all(p["location"] == str(plugin_dir) and "problem" not in p for p in mine), mine
    r = CliRunner().invoke(app, ["plugins"])
    assert r.exit_code == 0 and "hello-plugins 1.0" in r.output, r.output


def _toml_value(v: object) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    assert isinstance(v, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_built_in_cli_is_expressible_as_an_agent_file(name: str, tmp_path: Path) -> None:
    """Each built-in CLI written as an agent file loads as the same spec, installs the same
    layers and reads its output with the same parser."""
    spec = DEFINITIONS[name].spec
    keys: dict[str, object] = {
        "name": spec.name, "version": spec.default_version, "runtime": spec.runtime,
        "package": spec.package, "extra_requirements": spec.extra_requirements,
        "python": spec.python, "wire_api": list(spec.wire_apis),
        "command": [spec.executable, *spec.args], "env": spec.env, "files": spec.files,
        "parser": name, "transcripts": spec.transcripts,
        "completion_grace_s": spec.completion_grace_s, "continue_args": spec.continue_args,
        "reported_usage": spec.reported_usage}
    if spec.completion_marker is not None:
        keys["completion_marker"] = spec.completion_marker
    if spec.mcp is not None:
        keys["mcp"] = spec.mcp
    path = _agent_file(tmp_path, "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items()))
    agent = make_agent(path)
    assert isinstance(agent, InstalledCliAgent)
    assert agent.spec == spec
    assert agent.layers() == make_agent(name).layers()
    assert agent.definition.parse is DEFINITIONS[name].parse


def test_an_import_path_finds_the_current_directory_last(plugin_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``agentmeter run -a hello_plugin:HelloAgent`` from the directory holding hello_plugin.py
    (the console script does not put the current directory on sys.path)."""
    (tmp_path / "here_plugin.py").write_text((plugin_dir / "hello_plugin.py").read_text())
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    try:
        agent = make_agent("here_plugin:HelloAgent")
        assert agent.name == "hello-py" and sys.path[-1] == str(tmp_path)
    finally:
        sys.modules.pop("here_plugin", None)


def test_a_task_kind_is_not_imported_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Security review 3: a task from a checked-out repository saying ``kind = "evil:V"``
    imported ``./evil.py`` (its code run as the runner, root) when agentmeter ran from the
    repository: ``python -m`` searches the current directory first, the console script after
    everything. The user's own import paths (``-a module:Class``) still find it."""
    from agentmeter.plugins import load_import_path
    from agentmeter.verify.registry import kind_problem, make_verifier

    (tmp_path / "amsec3_evil.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('x')\n"
        "class V:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.delitem(sys.modules, "amsec3_evil", raising=False)
    problem = kind_problem("amsec3_evil:V")
    assert problem is not None and "current directory" in problem
    with pytest.raises(PluginError, match="current directory"):
        make_verifier("amsec3_evil:V")
    assert not (tmp_path / "RAN").exists()
    site = tmp_path / ".venv" / "site-packages"  # installed below the directory: allowed
    site.mkdir(parents=True)
    (site / "amsec3_ok.py").write_text("class V:\n    def verify(self): ...\n")
    sys.path.append(str(site))
    monkeypatch.delitem(sys.modules, "amsec3_ok", raising=False)
    assert "current directory" not in (kind_problem("amsec3_ok:V") or "")
    sys.modules.pop("amsec3_ok", None)
    assert load_import_path("amsec3_evil:V", "agent").__name__ == "V"
    sys.modules.pop("amsec3_evil", None)


def test_a_task_kind_in_the_current_directory_is_named_as_such(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The console script (no current directory on sys.path, as ``agentmeter run`` has it):
    a task's kind whose module sits in the current directory is not imported, and the error
    says why and what to do, not only that the module is not on the Python path."""
    from agentmeter.verify.registry import kind_problem

    (tmp_path / "amsec3_here.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('x')\n"
        "class V:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "amsec3_here", raising=False)
    problem = kind_problem("amsec3_here:V")
    assert problem is not None and "never imported from the current directory" in problem, problem
    assert not (tmp_path / "RAN").exists()
    assert "current directory" not in (kind_problem("amsec3_nowhere:V") or "")

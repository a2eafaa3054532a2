"""`agentmeter difftest run`: a given repository against a task's oracle, once."""

from __future__ import annotations

import json
from pathlib import Path

from difftest_tasks import make_difftest_task
from taskgen import make_task
from test_difftest_engine import RESTYLED
from typer.testing import CliRunner

from agentmeter.cli import app

runner = CliRunner()


def test_difftest_run_compares_a_repository_with_the_oracle(tmp_path: Path) -> None:
    task = make_difftest_task(tmp_path / "suite", "greet")
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    (candidate / "pyproject.toml").write_text(
        (task / "solution" / "ref" / "pyproject.toml").read_text())
    (candidate / "greet.py").write_text(RESTYLED)
    res = runner.invoke(app, ["difftest", "run", str(task), "--candidate", str(candidate),
                              "--judge-model", "scripted/judge", "--store",
                              str(tmp_path / "store"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    r = out["rewards"]
    assert r["build"] == 1.0 and (r["c01.em"], r["c01.sm"], r["c02.sm"]) == (0.0, 1.0, 0.0)
    assert out["classes"]["c01"] == "greet hello <name>"
    assert out["evaluation"]["calls"] > 0
    from agentmeter.store.db import Store

    with Store.open(tmp_path / "store") as st:
        (cfg,) = st.run_configs(out["run_id"])
    assert cfg.label == "candidate candidate"  # the user's candidate, not `oracle`
    # the text table, of a candidate that builds nothing (no case runs: the cheaper trial)
    empty = tmp_path / "empty"
    empty.mkdir()
    text = runner.invoke(app, ["difftest", "run", str(task), "--candidate", str(empty),
                               "--store", str(tmp_path / "store")])
    out = " ".join(text.output.split())
    assert text.exit_code == 0 and "greet hello <name> --shout" in out, text.output
    assert "build FAILED" in out and "the candidate did not build" in out
    assert "none is a framework error" in out


def test_difftest_run_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    plain = make_task(tmp_path / "suite", "plain")
    res = runner.invoke(app, ["difftest", "run", str(plain), "--candidate", str(tmp_path)])
    assert res.exit_code != 0 and "not a CLI-generation task" in res.output
    task = make_difftest_task(tmp_path / "suite", "greet")
    res = runner.invoke(app, ["difftest", "run", str(task), "--candidate",
                              str(tmp_path / "nothing")])
    assert res.exit_code != 0 and "must be a directory" in res.output


def test_an_instruction_with_a_nul_character_is_refused_when_the_task_loads(
        tmp_path: Path) -> None:
    """No agent CLI can be handed it as an argument (once a crash of every CLI agent)."""
    import pytest

    from agentmeter.tasks.errors import TaskError
    from agentmeter.tasks.native import load_native_task

    task = make_difftest_task(tmp_path / "suite", "greet")
    (task / "instruction.md").write_text("Build greet.\nA file holds 'a\x00b'.\n")
    with pytest.raises(TaskError, match="instruction.md.*NUL character"):
        load_native_task(task)


def test_prompt_shows_fixture_control_characters_escaped() -> None:
    from agentmeter.synth.prompt import Sample, _files_text

    text = _files_text(Sample.model_validate({
        "cls": "x <f>", "command": "x f", "exit_code": 0, "stdout": "", "fs_diff": {},
        "files": {"crlf.txt": "a\r\nb\x00\r\n", "plain.txt": "one\ttwo\n"}}))
    assert "\x00" not in text and "\r" not in text
    assert '"a\\r\\nb\\u0000\\r\\n"' in text and "one\ttwo" in text


def test_difftest_run_says_why_the_build_failed(capsys: object) -> None:
    """The printed table of a failed build names it a candidate failure with its cause."""
    from agentmeter.cli.difftest import _print_trial, candidate_label
    from agentmeter.records import TrialRecord, TrialStatus

    t = TrialRecord(id="c:t:0", run_id="r", config_id="c", task_id="t", attempt=0,
                    status=TrialStatus.FAILED, reward=0.0,
                    rewards={"build": 0.0, "cases_not_built": 3.0, "cases_framework_error": 0.0},
                    extra={"build_cause": "install exit 1: ERROR: No matching distribution "
                                          "found for [clack]", "difftest_classes": {}})
    from agentmeter.cli.common import console

    with console.capture() as cap:
        _print_trial(t, "r", as_json=False)
    text = " ".join(cap.get().split())
    assert "the candidate did not build" in text and "found for [clack]" in text
    assert "none is a framework error" in text
    assert candidate_label(Path("/x/my-tool"), None) == "candidate my-tool"
    assert candidate_label(Path("/x/my-tool"), "v2") == "candidate v2"

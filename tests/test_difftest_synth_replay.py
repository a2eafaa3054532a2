"""Replaying a start.py case generator (released benchmark interface) without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmeter.synth.replay import ReplayError, replay
from agentmeter.verify.difftest.config import write_cases

# our own start.py with the released interface: imports from BaseRepoAdapter/DiffTestEngine,
# an Enum of class templates, per-case try/except that prints a warning, a __main__ engine run
START_PY = '''
import os
import random
import sys
from enum import Enum

sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
from BaseRepoAdapter import BaseRepoAdapter, TestCase, FuzzHelper
from DiffTestEngine import DiffTestEngine

CASES_PER_CATEGORY = 10


class CmdCategory(Enum):
    COUNT = "wc -l <file>"
    WORDS = "wc -w <file>"
    BROKEN = "wc -c <file>"


class WcAdapter(BaseRepoAdapter):
    @property
    def base_image(self):
        return "debian:latest"

    def install_oracle(self, container):
        raise Exception("never called")

    def install_agent(self, container, local_agent_path):
        raise Exception("never called")

    def sanitize_stdout(self, raw_stdout):
        return raw_stdout.strip()

    def generate_test_cases(self):
        cases = []
        files = {"a.txt": "one\\ntwo\\n", "dir/b.txt": FuzzHelper.get_string(3, 6)}
        for category in CmdCategory:
            for i in range(CASES_PER_CATEGORY):
                try:
                    if category is CmdCategory.BROKEN and i == CASES_PER_CATEGORY - 1:
                        string.ascii_letters  # NameError, as in a released script
                    name = random.choice(["a.txt", "dir/b.txt", FuzzHelper.get_evil_string()])
                    cases.append(TestCase(
                        command=f"{category.value.split(' <')[0]} /test_data/{name} ",
                        category=category.value, mount_files=files,
                        prep_script="touch /test_data/x" if i % 2 else "",
                        env_vars={"LC_ALL": "C"} if category is CmdCategory.WORDS else {}))
                except Exception as e:
                    print(f"Warning: Failed to generate test case for {category.name}. Error: {e}")
                    continue
        if os.environ.get("BYTES_CASE"):
            cases.append(TestCase(command="wc x", category="wc", mount_files={"x": b"raw"}))
        return cases


if __name__ == "__main__":
    DiffTestEngine(adapter=WcAdapter(), agent_local_path="/nowhere").run(output_json_path="o.json")
'''


@pytest.fixture
def start_py(tmp_path: Path) -> Path:
    p = tmp_path / "repo" / "owner" / "wc" / "start.py"
    p.parent.mkdir(parents=True)
    p.write_text(START_PY)
    return p


def test_replay_is_seeded_and_maps_the_fields(start_py: Path, tmp_path: Path) -> None:
    first = replay(start_py, seed=5)
    assert first.adapter == "WcAdapter" and first.base_image == "debian:latest"
    assert first.custom_sanitizer
    assert first.skipped == 1 and "BROKEN" in first.errors[0] and "string" in first.errors[0]
    assert len(first.cases) == 29
    classes = [c.cls for c in first.cases]
    assert classes[0] == "wc -l <file>" and classes.count("wc -c <file>") == 9
    c = first.cases[1]
    assert c.id == "c0002" and c.files["a.txt"] == "one\ntwo\n" and "dir/b.txt" in c.files
    assert c.prep_script == "touch /test_data/x" and not c.command.endswith(" ")
    assert all(x.env == {"LC_ALL": "C"} for x in first.cases if x.cls == "wc -w <file>")
    # same seed: byte-identical; another seed: other draws
    a, b, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_cases(a, first.cases)
    write_cases(b, replay(start_py, seed=5).cases)
    write_cases(other, replay(start_py, seed=6).cases)
    assert a.read_bytes() == b.read_bytes() != other.read_bytes()


def test_replay_skips_cases_that_are_not_text(start_py: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BYTES_CASE", "1")
    got = replay(start_py, seed=5)
    assert got.skipped == 2 and len(got.cases) == 29
    assert "not text" in got.errors[-1]


def test_replay_errors_name_the_script(tmp_path: Path) -> None:
    bad = tmp_path / "start.py"
    bad.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(ReplayError, match=r"start\.py: replay failed: .*nonexistent_module_xyz"):
        replay(bad, seed=1)
    with pytest.raises(ReplayError, match="no such file"):
        replay(tmp_path / "missing.py", seed=1)
    bad.write_text("from BaseRepoAdapter import BaseRepoAdapter\n")
    with pytest.raises(ReplayError, match="expected one adapter class"):
        replay(bad, seed=1)

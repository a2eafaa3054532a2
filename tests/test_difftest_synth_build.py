"""`agentmeter difftest synth`: cases run against a real oracle in the task's real environment
(local sandbox), filtered, frozen; the prompt rendered from the verified samples."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.synth.build import SynthRecord, render_instruction, synthesize
from agentmeter.synth.prompt import PromptInput, Sample, render
from agentmeter.verify.difftest.config import read_cases

ORACLE = '''import argparse
import sys
import time

p = argparse.ArgumentParser(prog="tally", description="Count words in files.")
sub = p.add_subparsers(dest="cmd", required=True)
w = sub.add_parser("words", help="count the words of a file")
w.add_argument("file")
w.add_argument("--min", type=int, default=0, metavar="N", help="shortest word counted")
sub.add_parser("stamp", help="print the time")
b = sub.add_parser("broken", help="always fails")
b.add_argument("x")
a = p.parse_args()
if a.cmd == "words":
    with open(a.file) as f:
        print(len([x for x in f.read().split() if len(x) >= a.min]))
elif a.cmd == "stamp":
    print(time.time_ns())
else:
    sys.exit("broken: always fails")
'''

DOCKERFILE = """FROM debian:trixie
RUN apt-get update && apt-get install -y --no-install-recommends python3 \\
    && rm -rf /var/lib/apt/lists/*
COPY oracle/ /opt/oracle/src/
RUN mkdir -p /opt/oracle/bin && (echo '#!/usr/bin/python3'; cat /opt/oracle/src/tally.py) \\
    > /opt/oracle/bin/tally && chmod 755 /opt/oracle/bin/tally \\
    && chown -R 1001:1001 /opt/oracle && chmod 700 /opt/oracle
WORKDIR /app
"""

TOML = """version = "1.0"
[metadata]
tags = ["clitoolbench", "language:python"]
[verifier]
kind = "difftest"
[environment]
build_timeout_sec = 900.0
[difftest]
cli_name = "wordcount"
oracle_command = "tally"
language = "python"
case_timeout_sec = 10.0
"""

SCHEMA: dict[str, Any] = {
    "command": "tally",
    "overview": "Counts words. Written by Jane Doe.",
    "scrub": {"Jane Doe": "the author"},
    "fixtures": {"files": {"a.txt": "one two three\n", "b.txt": "alpha beta\n"}},
    "classes": [
        {"name": "tally words <file>", "command": "tally words {file}",
         "description": "Prints the number of words.",
         "params": [{"name": "file", "type": "path", "values": ["a.txt", "b.txt"],
                     "invalid": ["missing.txt"]}]},
        {"name": "tally words <file> --min <n>", "command": "tally words {file} {n}",
         "params": [{"name": "file", "type": "path", "values": ["a.txt", "b.txt"]},
                    {"name": "n", "type": "int", "flag": "--min", "min": 1, "max": 4,
                     "invalid": ["x"]}]},
        {"name": "tally stamp", "command": "tally stamp", "negative": False},
        {"name": "tally broken <x>", "command": "tally broken {x}",
         "params": [{"name": "x", "type": "str", "values": ["a", "b"]}]},
    ],
}


def make_task(root: Path, schema: dict[str, Any] | None = SCHEMA) -> Path:
    d = root / "tally"
    (d / "environment" / "oracle").mkdir(parents=True)
    (d / "task.toml").write_text(TOML)
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (d / "environment" / "oracle" / "tally.py").write_text(ORACLE)
    if schema is not None:
        (d / "schema.json").write_text(json.dumps(schema))
    return d


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> Ran:
    """``agentmeter difftest synth ARGS`` in this process (typer's runner: a Python start per
    call cost seconds on a loaded machine); the model-assisted test runs the real process."""
    res = CliRunner().invoke(app, ["difftest", "synth", *args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Ran(res.exit_code, res.stdout, res.stderr)


def cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmeter.cli", "difftest", "synth", *args],
                          capture_output=True, text=True, timeout=600)


def test_prompt_scrubs_names_and_shows_one_sample_per_class() -> None:
    sample = Sample(cls="acme-tool run <file>", command="acme-tool run a.txt",
                    files={"a.txt": "x\n"}, prep_script="mkdir -p d", exit_code=0,
                    stdout="ACME says 1\n", fs_diff={"/test_data/o.txt": {"type": "ADD"}})
    text = render(PromptInput(
        cli_name="runner", repo_name="runner", language="python", install="pip install .",
        overview="acme-tool by Ann Acme.", help_text="usage: acme-tool run FILE",
        samples=[sample], descriptions={"acme-tool run <file>": "Runs a file."},
        scrub={"acme-tool": "runner", "Ann Acme": "the author", "ACME": "TOOL"}))
    assert "acme" not in text.lower() and "Ann" not in text
    assert "#### Command Category: `runner run <file>`" in text and "`runner run a.txt`" in text
    assert '"stdout": "TOOL says 1\\n"' in text and '"exit_code": 0' in text
    assert "`pip install .`" in text and "entirely in **Python**" in text
    assert "usage: runner run FILE" in text and "Runs a file." in text and "mkdir -p d" in text


def test_cli_without_oracle_is_seeded_atomic_and_reports_bad_schema(tmp_path: Path) -> None:
    d = make_task(tmp_path)
    r = cli(str(d), "--no-oracle", "--seed", "3", "--per-class", "6")
    assert r.returncode == 0, r.stderr
    first = (d / "tests" / "cases.jsonl").read_bytes()
    rec = SynthRecord.model_validate_json((d / "tests" / "synth.json").read_text())
    assert rec.seed == 3 and rec.mode == "schema" and not rec.oracle_checked
    assert rec.generated == rec.cases == len(read_cases(d / "tests" / "cases.jsonl"))
    assert rec.duplicates > 0 and "duplicates removed" in r.stdout
    assert cli(str(d), "--no-oracle", "--seed", "3", "--per-class", "6").returncode == 0
    assert (d / "tests" / "cases.jsonl").read_bytes() == first
    # a broken schema: one line naming the file and field; the frozen cases stay as they were
    bad = json.loads(json.dumps(SCHEMA))
    bad["classes"][0]["params"][0]["type"] = "nope"
    (d / "schema.json").write_text(json.dumps(bad))
    r = cli(str(d), "--no-oracle")
    assert r.returncode != 0
    assert "schema.json: classes.0.params.0.type" in r.stderr + r.stdout
    assert (d / "tests" / "cases.jsonl").read_bytes() == first
    assert not list((d / "tests").glob("*.tmp"))


@pytest.mark.usefixtures("local_backend")
def test_oracle_run_filters_cases_and_renders_the_prompt(tmp_path: Path) -> None:
    d = make_task(tmp_path)
    rec = synthesize(d, seed=1, per_class=6)
    assert rec.oracle_checked and rec.generated > rec.cases
    # `tally stamp` differs between the two runs; `tally broken` never exits 0
    assert rec.dropped.get("nondeterministic") == 1
    assert rec.dropped.get("oracle_failed", 0) >= 2
    assert set(rec.invalid_classes) == {"tally stamp", "tally broken <x>"}
    cases = read_cases(d / "tests" / "cases.jsonl")
    assert {c.cls for c in cases} == {"tally words <file>", "tally words <file> --min <n>"}
    negatives = [c for c in cases if c.expect_error]
    assert len(negatives) == 2  # kept: the oracle is expected to fail on them
    sample = rec.samples["tally words <file>"]
    assert sample.exit_code == 0 and sample.stdout.strip() in {"3", "2"}
    assert "tally" in rec.help and "usage: tally words" in rec.help["tally words"]
    text = render_instruction(d)
    assert (d / "instruction.md").read_text() == text
    assert "tally" not in text and "Jane Doe" not in text
    assert "**CLI Tool Name**: wordcount" in text and "`wordcount words a.txt`" in text \
        or "`wordcount words b.txt`" in text
    assert "usage: wordcount words" in text and "Prints the number of words." in text
    assert "Command Category: `wordcount stamp`" not in text


@pytest.mark.usefixtures("local_backend")
def test_from_help_drafts_the_schema_in_the_sandbox(tmp_path: Path) -> None:
    d = make_task(tmp_path, schema=None)
    r = cli(str(d), "--from-help", "--per-class", "3", "--seed", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    draft = json.loads((d / "schema.json").read_text())
    names = [c["name"] for c in draft["classes"]]
    assert "tally words <file>" in names and "tally words --min <N> <file>" in names
    rec = SynthRecord.model_validate_json((d / "tests" / "synth.json").read_text())
    assert rec.mode == "help" and "tally words <file>" not in rec.invalid_classes
    assert "tally broken <x>" in rec.invalid_classes
    # help text that does not parse: one error naming the command, nothing written
    (d / "environment" / "oracle" / "tally.py").write_text("print('hi')\n")
    (d / "schema.json").unlink()
    (d / "tests" / "cases.jsonl").unlink()
    r = cli(str(d), "--from-help")
    assert r.returncode != 0
    assert "`tally --help`: no usage line, option or command" in r.stdout + r.stderr
    assert not (d / "tests" / "cases.jsonl").exists()


TALLY_START_PY = '''
import random
from enum import Enum

from BaseRepoAdapter import BaseRepoAdapter, FuzzHelper, TestCase


class CmdCategory(Enum):
    WORDS = "tally words <file>"


class TallyAdapter(BaseRepoAdapter):
    base_image = "python:latest"

    def install_oracle(self, container):
        raise Exception("never called")

    def install_agent(self, container, local_agent_path):
        raise Exception("never called")

    def generate_test_cases(self):
        cases = []
        for i in range(20):
            text = FuzzHelper.get_string(3, 8) + " " + FuzzHelper.get_string(3, 8)
            cases.append(TestCase(command=f"tally words /test_data/f{random.randint(1, 3)}.txt",
                                  category=CmdCategory.WORDS.value,
                                  mount_files={"f1.txt": text, "f2.txt": "", "f3.txt": "a b c"}))
        return cases
'''


def test_cli_replays_a_start_py(tmp_path: Path) -> None:
    d = make_task(tmp_path, schema=None)
    start = tmp_path / "start.py"
    start.write_text(TALLY_START_PY)
    r = cli(str(d), "--from-start-py", str(start), "--seed", "9", "--no-oracle")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = SynthRecord.model_validate_json((d / "tests" / "synth.json").read_text())
    assert rec.mode == "start_py" and rec.generated == rec.cases == 20
    first = (d / "tests" / "cases.jsonl").read_bytes()
    assert cli(str(d), "--from-start-py", str(start), "--seed", "9", "--no-oracle").returncode == 0
    assert (d / "tests" / "cases.jsonl").read_bytes() == first
    r = cli(str(d), "--from-start-py", str(tmp_path / "nope.py"), "--no-oracle")
    assert r.returncode != 0 and "nope.py: no such file" in r.stdout + r.stderr


def test_model_assisted_synthesis_through_the_gateway(tmp_path: Path) -> None:
    """The auxiliary model (the labelled test double scripted/schema-from-file, answering with
    the task's schema.json) is asked through the metering gateway; a class the oracle never
    runs is sent back as feedback until the refinement limit, then dropped by the filter."""
    d = make_task(tmp_path)
    res = cli_process(str(d), "--model", "scripted/schema-from-file", "--max-refinements", "1",
              "--seed", "1", "--per-class", "6")
    assert res.returncode == 0, res.stderr + res.stdout
    assert "auxiliary model scripted/schema-from-file: 2 rounds, 2 calls" in res.stdout
    rec = SynthRecord.model_validate_json((d / "tests" / "synth.json").read_text())
    assert rec.mode == "model" and rec.model is not None
    assert (rec.model.rounds, rec.model.calls) == (2, 2)
    assert (rec.model.usage.get("input") or 0) > 0  # metered like any call
    assert len(rec.model.feedback) == 1 and "tally broken <x>" in rec.model.feedback[0]
    assert "usage: tally words" in rec.model.feedback[0] or "exited" in rec.model.feedback[0]
    assert (d / "schema.draft.json").is_file()  # schema.json existed: not overwritten
    assert "tally broken <x>" in rec.invalid_classes
    assert {c.cls for c in read_cases(d / "tests" / "cases.jsonl")} == {
        "tally words <file>", "tally words <file> --min <n>"}
    bad = cli_process(str(d), "--model", "scripted/nonsense")
    assert bad.returncode != 0 and "--model" in (bad.stdout + bad.stderr)

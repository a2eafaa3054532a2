"""Task building for CLI-generation tasks: schema.json, seeded generation, entry-point choice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.synth.generate import generate, render
from agentmeter.synth.schema import SchemaError, load_schema, parse_schema
from agentmeter.verify.difftest import entrypoint
from agentmeter.verify.difftest.config import read_cases, write_cases

TREE_SCHEMA = {
    "command": "tree",
    "fixtures": {"files": {"d/a.txt": "a\n", "d/sub/b.txt": "b\n", "d/.hidden": "h\n"},
                 "prep_script": "mkdir -p d/empty"},
    "classes": [
        {"name": "tree <dir> -L <n>", "command": "tree --noreport {dir} {n}",
         "params": [
             {"name": "dir", "type": "path", "values": ["d", "d/sub"], "invalid": ["nope/"]},
             {"name": "n", "type": "int", "flag": "-L", "min": 1, "max": 3,
              "invalid": ["0", "x"]}]},
        {"name": "tree [-a] [--charset <cs>] <dir>", "command": "tree {a} {cs} {dir}",
         "params": [
             {"name": "a", "type": "bool", "flag": "-a", "required": False},
             {"name": "cs", "type": "choice", "flag": "--charset=", "values": ["ascii", "utf-8"],
              "required": False},
             {"name": "dir", "type": "path", "values": ["d"], "missing_is_error": False,
              "invalid": ["missing dir"]}]},
    ],
}


def test_schema_rejects_bad_input_naming_the_field(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(TREE_SCHEMA))
    bad["classes"][0]["params"][1].pop("max")
    with pytest.raises(SchemaError, match=r"classes\.0\.params\.1.*int needs values or min and max"):
        parse_schema(bad)
    bad = json.loads(json.dumps(TREE_SCHEMA))
    bad["classes"][0]["command"] = "tree {dir}"
    with pytest.raises(SchemaError, match=r"classes\.0.*placeholders \['dir'\] do not match"):
        parse_schema(bad)
    bad = json.loads(json.dumps(TREE_SCHEMA))
    bad["fixtures"]["files"] = {"../x": ""}
    with pytest.raises(SchemaError, match=r"fixtures.*must be relative"):
        parse_schema(bad)
    p = tmp_path / "schema.json"
    p.write_text("{\n  nope")
    with pytest.raises(SchemaError, match=r"schema\.json:2: not JSON"):
        load_schema(p)


def test_render_drops_the_token_of_a_left_out_parameter() -> None:
    assert render("tool {a} --depth={n} 'x  y' {b}", {"a": "-v", "n": None, "b": "'f g'"}) \
        == "tool -v 'x  y' 'f g'"
    assert render("{a} tool", {"a": None}) == "tool"


def test_generation_is_seeded_and_byte_identical(tmp_path: Path) -> None:
    schema = parse_schema(TREE_SCHEMA)
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_cases(a, generate(schema, seed=7).cases)
    write_cases(b, generate(schema, seed=7).cases)
    write_cases(c, generate(schema, seed=8).cases)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    cases = read_cases(a)
    assert [x.id for x in cases] == [f"c{i:04d}" for i in range(1, len(cases) + 1)]


def test_generation_counts_duplicates_and_one_negative_per_class() -> None:
    schema = parse_schema(TREE_SCHEMA)
    gen = generate(schema, seed=1, per_class=50)
    first, second = (gen.counts[c.name] for c in schema.classes)
    # pools: 2 dirs x 3 levels = at most 6 distinct positives; -a x charset (3 ways) x 1 dir = 6
    assert first.negative == 1 and 1 <= first.positive <= 6
    assert first.positive + first.duplicates == 49
    assert second.negative == 1 and second.positive + second.duplicates == 49
    assert gen.duplicates == first.duplicates + second.duplicates > 80
    assert len(gen.cases) == first.positive + second.positive + 2
    neg = [x for x in gen.cases if x.expect_error]
    assert len(neg) == 2 and all(x.command.startswith("tree") for x in neg)
    assert "'missing dir'" in neg[1].command  # invalid values are shell-quoted too
    assert any("--charset=utf-8" in x.command for x in gen.cases)
    assert all("{" not in x.command for x in gen.cases)


def test_generated_cases_run_as_intended_against_real_tree(tmp_path: Path) -> None:
    """The positives of a schema run by the real tool exit 0, its negatives fail."""
    ensure_tools({"tree": "tree"}, "the synthesis tests")
    gen = generate(parse_schema(TREE_SCHEMA), seed=3, per_class=20)
    for case in gen.cases:
        work = tmp_path / case.id
        for rel, text in case.files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        subprocess.run(["sh", "-c", case.prep_script], cwd=work, check=True)
        r = subprocess.run(["sh", "-c", case.command], cwd=work, capture_output=True, text=True)
        assert (r.returncode != 0) == case.expect_error, (case.command, r.stdout, r.stderr)


# --- entry-point detection (spec §2.1) ----------------------------------------------------------

def test_entry_point_rules_in_priority_order() -> None:
    choose = entrypoint.choose
    assert choose([], "x") is None
    assert choose(["files-to-prompt", "ftp"], "simonw/files-to-prompt") == ("files-to-prompt", "exact")
    assert choose(["Files-To-Prompt", "ftp"], "files-to-prompt") == ("Files-To-Prompt", "case")
    assert choose(["ftp", "files"], "files-to-prompt") == ("ftp", "acronym")
    assert choose(["GM", "gitm"], "gitMetrics") == ("GM", "acronym")
    assert entrypoint.tokens("HTTPServer_v2.tool name") == ["HTTP", "Server", "v2", "tool", "name"]
    assert choose(["mp4", "mp4analyze", "analyzer"], "mp4analyzer") == ("mp4analyze", "levenshtein")
    # ties: the shorter name, then alphabetical
    assert choose(["abcx", "abcyy"], "abcz") == ("abcx", "levenshtein")
    assert choose(["abd", "abc"], "abz") == ("abc", "levenshtein")
    assert entrypoint.similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)


def test_help_ok_on_real_help_output() -> None:
    ensure_tools({"tree": "tree", "dos2unix": "dos2unix"}, "the synthesis tests")
    for argv in (["tree", "--help"], ["dos2unix", "--help"], [sys.executable, "-m", "json.tool", "-h"]):
        r = subprocess.run(argv, capture_output=True, text=True)
        assert entrypoint.help_ok(r.returncode, r.stdout + r.stderr), argv
    r = subprocess.run(["tree", "--no-such-option"], capture_output=True, text=True)
    assert not entrypoint.help_ok(r.returncode, r.stdout + r.stderr)
    assert entrypoint.help_ok(0, "  -v  verbose")
    assert not entrypoint.help_ok(0, "hello world, a-b and x--y are no options")


def test_appeared_sees_added_and_replaced_executables(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = bin_dir / "old"
    old.write_text("#!/bin/sh\n")
    old.chmod(0o755)
    (bin_dir / "data").write_text("not executable")
    before = entrypoint.snapshot(str(bin_dir))
    assert before.keys() == {"old"}
    new = bin_dir / "new-tool"
    new.write_text("#!/bin/sh\n")
    new.chmod(0o755)
    os.symlink(new, bin_dir / "nt")
    replaced = bin_dir / "old.tmp"
    shutil.copy(old, replaced)
    replaced.replace(old)  # pip replaces scripts by rename: a new inode
    os.symlink(tmp_path / "dangling", bin_dir / "broken")
    assert entrypoint.appeared(before, entrypoint.snapshot(str(bin_dir))) == ["new-tool", "nt", "old"]

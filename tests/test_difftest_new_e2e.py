"""Issue 29 item 3, end to end: a new CLI-generation task made with `difftest new`, its schema
drafted by `synth --from-help`, only the marked placeholder values edited, `synth` again, and
`tasks check` finds it valid (oracle passes, nop fails) — no generated file edited by hand but
the listed values. Offline: the oracle is a local Python project (`--oracle-dir`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.synth.helpwalk import draft_values
from agentmeter.synth.schema import parse_schema

#: argparse, with a required option (bare in the usage line) and a choice
GREET = '''import argparse


def main():
    p = argparse.ArgumentParser(prog="greet")
    p.add_argument("-n", "--name", required=True)
    p.add_argument("--style", choices=["plain", "loud"], default="plain")
    a = p.parse_args()
    if a.name not in ("ada", "bob", "cy"):
        p.error(f"unknown name {a.name}")
    text = f"hello {a.name}"
    print(text.upper() if a.style == "loud" else text)
'''


@pytest.mark.slow
def test_new_then_synth_then_tasks_check_with_only_the_marked_values_edited(
        tmp_path: Path) -> None:
    runner = CliRunner()
    proj = tmp_path / "greet"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "greet"\nversion = "1"\n[project.scripts]\ngreet = "greet:main"\n')
    (proj / "greet.py").write_text(GREET)
    r = runner.invoke(app, ["difftest", "new", "greet-task", "--oracle-dir", str(proj),
                            "--into", str(tmp_path / "suite")])
    assert r.exit_code == 0, r.output
    task = tmp_path / "suite" / "greet-task"
    # the draft: --help walked in the task's environment (no oracle run yet: its drafted
    # words are not names the oracle takes); synth lists the values to edit, and where
    r = runner.invoke(app, ["difftest", "synth", str(task), "--from-help", "--no-oracle",
                            "--per-class", "2"])
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "placeholders to edit" in said and "schema.json" in said, said
    schema = json.loads((task / "schema.json").read_text())
    marked = draft_values(parse_schema(schema))
    assert len(marked) == 2 and all(m in said for m in marked), (marked, said)
    for cls in schema["classes"]:  # the marked values only: each listed "class › param"
        for p in cls.get("params", []):
            if any(m.startswith(f"{cls['name']} › {p['name']}:") for m in marked):
                assert p["name"] == "name"
                p["values"] = ["ada", "bob", "cy"]
    (task / "schema.json").write_text(json.dumps(schema, indent=1))
    r = runner.invoke(app, ["difftest", "synth", str(task), "--per-class", "2", "--prompt"])
    assert r.exit_code == 0, r.output
    assert "in 2 classes" in r.output and "placeholders" not in r.output, r.output
    r = runner.invoke(app, ["tasks", "check", str(task)])
    assert r.exit_code == 0 and "1/1 tasks valid" in r.output, r.output


def test_a_release_without_sdist_gets_its_reference_from_its_wheel(tmp_path: Path) -> None:
    """cowsay 6.1 ships only a wheel: the reference is its modules with a pyproject.toml rebuilt
    from the wheel's metadata, copied by solve.sh (no network: a wheel made here)."""
    import tomllib
    import zipfile

    from agentmeter.synth.scaffold import ScaffoldError, reference_from_wheel, scaffold

    task = scaffold(tmp_path, "moo", "pypi", "moo==1.0")
    wheel = tmp_path / "moo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("moo/__init__.py", "")
        z.writestr("moo/main.py", "def cli():\n    print('moo')\n")
        z.writestr("moo/data/cows.txt", "cow\n")
        z.writestr("moo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: moo\n"
                   "Version: 1.0\nRequires-Dist: rich\nRequires-Dist: pytest ; extra == 'test'\n")
        z.writestr("moo-1.0.dist-info/entry_points.txt", "[console_scripts]\nmoo = moo.main:cli\n")
        # security review 3: an absolute member name (dest / "/x" is "/x") wrote any host path
        z.writestr(str(tmp_path / "outside.txt"), "written by the wheel\n")
    ref = reference_from_wheel(wheel, task, "moo")
    assert not (tmp_path / "outside.txt").exists()
    assert (ref / "moo" / "main.py").is_file() and (ref / "moo" / "data" / "cows.txt").is_file()
    assert not list(ref.glob("*.dist-info"))
    meta = tomllib.loads((ref / "pyproject.toml").read_text())
    assert meta["project"] == {"name": "moo", "version": "1.0", "dependencies": ["rich"],
                               "scripts": {"moo": "moo.main:cli"}}
    assert meta["tool"]["setuptools"]["packages"] == ["moo"]
    assert 'cp -rL "$src"/. /app/' in (task / "solution" / "solve.sh").read_text()
    with pytest.raises(ScaffoldError, match="pure-Python"):
        reference_from_wheel(tmp_path / "moo-1.0-cp311-cp311-linux_x86_64.whl", task, "moo")

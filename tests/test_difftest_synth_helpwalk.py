"""Schema drafts from real --help output (GNU-style, argparse, click, cobra, Go flag)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentmeter.sandbox.hosttools import DOCKER_TOOLS, ensure_tools
from agentmeter.synth.build import placeholder_hint
from agentmeter.synth.generate import generate
from agentmeter.synth.helpwalk import HelpError, draft_values, parse_help, walk
from agentmeter.synth.schema import CommandClass, parse_schema


def run(argv: list[str]) -> tuple[int, str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def by_name(classes: list[CommandClass]) -> dict[str, CommandClass]:
    return {c.name: c for c in classes}


CLICK_PROG = '''
import click

@click.group()
def cli():
    """Copy and greet."""

@cli.command()
@click.argument("src", type=click.Path())
@click.option("-c", "--count", type=int, default=1, help="how many")
@click.option("--mode", type=click.Choice(["fast", "slow"]))
@click.option("--verbose/--quiet")
def copy(src, count, mode, verbose):
    """Copy SRC."""
    click.echo(f"{src} {count} {mode} {verbose}")

@cli.command()
@click.argument("name")
@click.option("--ratio", type=float, required=True)
def greet(name, ratio):
    """Greet NAME."""
    click.echo(f"hi {name} {ratio}")

cli()
'''

ARGPARSE_PROG = '''
import argparse
p = argparse.ArgumentParser(prog="inv")
p.add_argument("--verbose", action="store_true")
sub = p.add_subparsers(dest="cmd", required=True)
a = sub.add_parser("add", help="add an item")
a.add_argument("item")
a.add_argument("-n", "--count", type=int, metavar="N", default=1)
a.add_argument("--kind", choices=["book", "tool"])
a.add_argument("--out", metavar="FILE")
a.add_argument("-t", "--tag", required=True)
r = sub.add_parser("remove", help="remove items")
r.add_argument("items", nargs="+")
args = p.parse_args()
print(vars(args))
'''

# the Go standard library's flag package prints this shape for `prog -h` (exit 0 since Go 1.15)
GO_FLAG_HELP = """Usage of gocount:
  -L int
    \tmaximum depth (default 2)
  -name string
    \tthe name to greet
  -v\tverbose output
  -ratio float
    \ta ratio
"""


def test_gnu_style_tree_help_walks_into_classes() -> None:
    ensure_tools({"tree": "tree", "dos2unix": "dos2unix"}, "the help-walk tests")
    w = walk(run, ["tree"])
    classes = by_name(w.schema.classes)
    assert list(w.help) == ["tree"] and "usage: tree" in w.help["tree"]
    base = classes["tree [<directory>]"]
    assert base.params[0].type == "path" and not base.params[0].required
    level = classes["tree -L <level> [<directory>]"]
    assert level.command == "tree {l} {directory}" and level.params[0].type == "int"
    assert classes["tree -a [<directory>]"].params[0].type == "bool"
    assert "tree --charset <X> [<directory>]" in classes
    assert not any("--help" in n or "--version" in n or "Listing" in n for n in classes)
    d = by_name(walk(run, ["dos2unix"]).schema.classes)
    assert d["dos2unix --keepdate [<file>]"].params[0].type == "bool"
    assert d["dos2unix --info [<file>]"].params[0].type == "bool"  # -i, --info[=FLAGS]: optional


def test_argparse_subcommands_and_types(tmp_path: Path) -> None:
    prog = tmp_path / "inv.py"
    prog.write_text(ARGPARSE_PROG)
    w = walk(run, [sys.executable, str(prog)], command="inv")
    assert w.schema.command == "inv" and len(w.help) == 3
    names = {c.name.split(str(prog))[1].strip(): c for c in w.schema.classes}
    assert "remove <items>" in names
    # argparse marks a required option only by leaving it unbracketed in the usage line: it
    # belongs to every class of its command (the oracle refuses any case without it)
    assert "add --tag <TAG> <item>" in names and "add <item>" not in names
    count = names["add --count <N> --tag <TAG> <item>"]  # the long name is the class's
    assert count.params[0].flag == "--count" and count.params[0].type == "int"
    assert count.params[1].flag == "--tag" and count.params[1].required
    assert names["add --kind <{book,tool}> --tag <TAG> <item>"].params[0].values == ["book", "tool"]
    assert names["add --out <FILE> --tag <TAG> <item>"].params[0].type == "path"
    assert not any(n.startswith("--verbose") for n in names)  # the root only has subcommands


def test_click_group_with_required_option(tmp_path: Path) -> None:
    pytest.importorskip("click")
    prog = tmp_path / "prog.py"
    prog.write_text(CLICK_PROG)
    w = walk(run, [sys.executable, str(prog)], command="prog")
    names = {c.name.split(str(prog))[1].strip(): c for c in w.schema.classes}
    assert names["copy --mode <[fast|slow]> <SRC>"].params[0].values == ["fast", "slow"]
    assert names["copy --count <INTEGER> <SRC>"].params[0].type == "int"
    assert names["copy --verbose <SRC>"].params[0].type == "bool"
    assert names["copy <SRC>"].params[0].type == "path"
    # a required option is part of every class of its command
    greet = names["greet --ratio <FLOAT> <NAME>"]
    assert [p.type for p in greet.params] == ["float", "str"]
    assert not any(n.startswith("greet --help") for n in names)
    # the draft is a valid schema whose positive cases the real program accepts
    schema = parse_schema(w.schema.model_dump(mode="json"))
    for case in generate(schema, seed=1, per_class=6).cases:
        if not case.expect_error:
            code, out = run(["sh", "-c", case.command])
            assert code == 0, (case.command, out)


def test_cobra_help_of_the_docker_cli() -> None:
    # installed by the project's installer, as the docker backend does (a skip decided at
    # collection would skip it on a fresh machine, where the CLI comes later)
    ensure_tools(DOCKER_TOOLS, "the help-walk tests")
    w = walk(run, ["docker", "network"], max_depth=1)
    assert "docker network ls" in w.help and "docker network" in w.help
    names = by_name(w.schema.classes)
    assert names["docker network ls --format <string>"].params[0].type == "str"
    assert names["docker network ls --quiet"].params[0].type == "bool"
    assert "docker network rm <NETWORK>" in names


def test_go_flag_help_shape() -> None:
    page = parse_help(GO_FLAG_HELP, "gocount")
    assert page is not None
    assert [(o.name, o.metavar) for o in page.options] == [
        ("-L", "int"), ("-name", "string"), ("-v", None), ("-ratio", "float")]


def test_unparsable_help_names_the_command(tmp_path: Path) -> None:
    prog = tmp_path / "chatty.py"
    prog.write_text("print('hello there, nothing to see')\n")
    with pytest.raises(HelpError, match=r"chatty\.py --help`: no usage line, option or command"):
        walk(run, [sys.executable, str(prog)])
    with pytest.raises(HelpError, match=r"^`.*python\S* -c raise SystemExit\(3\) --help` "
                       r"exited 3: \(no output\)$"):
        walk(run, [sys.executable, "-c", "raise SystemExit(3)"])


def test_drafted_values_are_named_as_placeholders_to_edit(tmp_path: Path) -> None:
    """`synth --from-help` says which values are generic drafts, and where to edit them."""
    prog = tmp_path / "inv.py"
    prog.write_text(ARGPARSE_PROG)
    schema = walk(run, [sys.executable, str(prog)], command="inv").schema
    drafts = draft_values(schema)
    assert drafts and all(" › " in d for d in drafts)
    assert not any("book" in d.rpartition(": ")[2] for d in drafts)  # choices are real
    hint = placeholder_hint(tmp_path / "schema.json", schema)
    assert f"{tmp_path / 'schema.json'} with placeholder values" in hint
    assert "without --from-help" in hint and drafts[0] in hint

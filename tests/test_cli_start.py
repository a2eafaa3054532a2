"""The command line starts light: ``--help``, ``--version``, ``tasks list`` and ``run`` up to its
real work import no heavy dependency (numpy, SQLAlchemy, aiohttp, ...) and none of agentmeter's
own heavy modules. Guards the imports, not the timing (benchmarks/cli_start.py measures that).

Each case runs in a fresh interpreter (the test process has imported everything already)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

import pytest
import typer
import typer.main

#: third-party packages no start-up path may import
HEAVY = ("numpy", "sqlalchemy", "aiohttp", "pandas", "pyarrow", "playwright", "rapidfuzz", "ray",
         "psycopg", "genai_prices", "openai", "anthropic")
#: agentmeter's own modules that pull those in (or do real work)
HEAVY_OWN = ("agentmeter.store.db", "agentmeter.gateway.server", "agentmeter.runner.session",
             "agentmeter.metrics.frame", "agentmeter.report.html", "agentmeter.sandbox.local",
             "agentmeter.verify.difftest.verifier", "agentmeter.importers.harbor",
             "agentmeter.tasks.datasets")  # (-d only: the registry, git fetching)

PROBE = """
import json, os, sys
sys.argv = ["agentmeter", *json.loads(sys.argv[1])]
from agentmeter.cli import app
code = 0
try:
    app()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

# ``run`` up to its real work: the runner's entry points, the first thing the command imports,
# are stand-ins that report the modules loaded by then
RUN_PROBE = """
import json, sys, types
stub = types.ModuleType("agentmeter.runner.session")
class RunSetupError(Exception):
    pass
def begin(*args, **kwargs):
    print(json.dumps({"code": 0, "modules": sorted(sys.modules)}), file=sys.stderr)
    raise SystemExit(0)
stub.RunSetupError, stub.load_grid, stub.make_request, stub.prepare = RunSetupError, begin, begin, begin
sys.modules["agentmeter.runner.session"] = stub
sys.argv = ["agentmeter", "run", "--suite", "starter", "--agent", "oracle"]
from agentmeter.cli import app
app()
"""


def loaded(script: str, *args: str) -> tuple[int, set[str]]:
    r = subprocess.run([sys.executable, "-c", script, json.dumps(args)], capture_output=True,
                       text=True, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    out = json.loads(last)
    return int(out["code"] or 0), set(out["modules"])


def heavy_in(modules: set[str]) -> list[str]:
    tops = {m.partition(".")[0] for m in modules}
    return sorted([h for h in HEAVY if h in tops] + [m for m in HEAVY_OWN if m in modules])


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"],
                                  ["tasks", "list", "starter"], ["score", "--help"],
                                  ["report", "--help"], ["gateway", "--help"]],
                         ids=lambda a: " ".join(a))
def test_start_imports_nothing_heavy(argv: list[str]) -> None:
    code, modules = loaded(PROBE, *argv)
    assert code == 0
    assert "agentmeter.cli.app" in modules  # the probe ran the program
    assert heavy_in(modules) == []


def test_help_imports_no_models_nor_asyncio() -> None:
    _, modules = loaded(PROBE, "--help")
    tops = {m.partition(".")[0] for m in modules}
    assert not {"pydantic", "asyncio", "yaml", "rich"} & tops  # plain help: no rich
    own = sorted(m for m in modules if m.startswith("agentmeter."))
    assert all(m.startswith(("agentmeter.cli", "agentmeter.paths", "agentmeter.lazy",
                             "agentmeter.metrics", "agentmeter.report")) for m in own), own
    assert "agentmeter.metrics.choices" in own and "agentmeter.metrics.ams" not in own


def test_run_reaches_its_work_without_heavy_imports() -> None:
    code, modules = loaded(RUN_PROBE)
    assert code == 0
    modules.discard("agentmeter.runner.session")  # the stand-in
    assert heavy_in(modules) == []
    assert not {m for m in modules if m.startswith(("agentmeter.runner", "agentmeter.tasks"))}


def test_lazy_registry_entries_resolve() -> None:
    """What the registries and packages name by path exists (imported here, in-process)."""
    from agentmeter.verify.mounts import TB_PARSER_NAMES, TESTS_MOUNT
    from agentmeter.verify.registry import make_verifier, verifier_kinds
    from agentmeter.verify.tb_parsers import TB_PARSERS

    for kind in verifier_kinds():
        made = make_verifier(kind)
        assert callable(made.verify) and callable(made.stage), kind
    assert set(TB_PARSER_NAMES) == set(TB_PARSERS)
    assert importlib.import_module("agentmeter.verify.command").TESTS_MOUNT == TESTS_MOUNT
    for package in ("agentmeter.metrics", "agentmeter.pricing", "agentmeter.gateway",
                    "agentmeter.importers"):
        mod = importlib.import_module(package)
        for name in mod._LAZY:
            assert getattr(mod, name) is getattr(importlib.import_module(mod._LAZY[name]), name)
        assert set(mod._LAZY) <= set(dir(mod))
        with pytest.raises(AttributeError):
            _ = mod.no_such_name


def test_subcommand_help_imports_no_pydantic_nor_rich() -> None:
    """``CMD --help`` builds that command only and prints plain help (not on a terminal): no rich,
    and no pydantic for the root group's unused flags (typer converts a non-bool through it)."""
    for argv in (["run", "--help"], ["tasks", "--help"]):
        code, modules = loaded(PROBE, *argv)
        tops = {m.partition(".")[0] for m in modules}
        assert code == 0 and not {"pydantic", "rich"} & tops, argv


def _apps(mode: str | None) -> tuple[typer.Typer, typer.Typer]:
    """The program with the lazy root group, and the same commands registered eagerly on one
    plain typer app (as before the lazy group)."""
    from agentmeter.cli.app import _Commands, app

    lazy = typer.Typer(help=app.info.help, no_args_is_help=True, cls=_Commands,
                       rich_markup_mode=mode)  # type: ignore[arg-type]
    eager = typer.Typer(help=app.info.help, no_args_is_help=True,
                        rich_markup_mode=mode)  # type: ignore[arg-type]
    for made in (lazy, eager):
        made.registered_callback = app.registered_callback
    for module in _Commands.modules:
        module.register(eager)
    return lazy, eager


def _words(text: str) -> str:
    return " ".join(text.split())


def test_lazy_group_helps_as_the_eager_one(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command and option is listed and described as typer's eager group does (plain help:
    rich's ``\\[`` shown as ``[``); a rich help is the same text; ``--help`` builds no command."""
    from agentmeter.cli.lazygroup import LazyGroup

    monkeypatch.setenv("COLUMNS", "100")

    def helps(cmd: Any, argv: list[str]) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            cmd.main(argv, prog_name="agentmeter")
        assert e.value.code == 0, argv
        return capsys.readouterr().out

    lazy, eager = (typer.main.get_command(made) for made in _apps(None))  # each built once
    names = list(lazy.commands)  # type: ignore[attr-defined]
    assert len(names) >= 20 and "run" in names and "tasks" in names
    for argv in [["--help"], *[[name, "--help"] for name in names]]:
        got, want = helps(lazy, argv), helps(eager, argv)
        assert _words(got) == _words(want.replace("\\[", "[")) and "\\[" not in got, argv
    assert "agent name[@version]" in helps(lazy, ["run", "--help"])
    lazy, eager = (typer.main.get_command(made) for made in _apps("rich"))
    for argv in (["--help"], ["run", "--help"]):  # on a terminal: rich help, as before
        got = helps(lazy, argv)
        assert got == helps(eager, argv) and "╭" in got, argv
    assert "agent name[@version]" in got

    group = typer.main.get_command(_apps(None)[0])
    assert isinstance(group, LazyGroup)
    helps(group, ["--help"])
    assert group.commands.built == {}  # type: ignore[attr-defined]
    assert group.get_command(None, "run") is group.get_command(None, "run")  # type: ignore[arg-type]
    assert set(group.commands.built) == {"run"}  # type: ignore[attr-defined]

"""The command line starts light: ``--help``, ``--version``, ``tasks list`` and ``run`` up to its
real work import no heavy dependency (numpy, SQLAlchemy, aiohttp, ...) and none of agentmeter's
own heavy modules. Guards the imports, not the timing (benchmarks/cli_start.py measures that).

Each case runs in a fresh interpreter (the test process has imported everything already)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

#: third-party packages no start-up path may import
HEAVY = ("numpy", "sqlalchemy", "aiohttp", "pandas", "pyarrow", "playwright", "rapidfuzz", "ray",
         "psycopg", "genai_prices", "openai", "anthropic")
#: agentmeter's own modules that pull those in (or do real work)
HEAVY_OWN = ("agentmeter.store.db", "agentmeter.gateway.server", "agentmeter.runner.session",
             "agentmeter.metrics.frame", "agentmeter.report.html", "agentmeter.sandbox.local",
             "agentmeter.verify.difftest.verifier", "agentmeter.importers.harbor")

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
    assert not {"pydantic", "asyncio", "yaml"} & tops
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

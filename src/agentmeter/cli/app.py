"""The ``agentmeter`` program: the typer app and its command groups, one module each.

Thin: each command parses its options, calls the packages and prints.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from agentmeter.cli import (
    analysis,
    data,
    difftest,
    gateway,
    judge,
    models,
    plugins,
    report,
    run,
    setup,
    tasks,
)

app = typer.Typer(help="Evaluate deployed agent configurations (model × agent) on local tasks "
                  "in sandboxes, measuring success and cost together.", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from agentmeter import __version__

        print(f"agentmeter {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Evaluate deployed agent configurations (model × agent) on local tasks in sandboxes."""


for group in (run, tasks, setup, analysis, gateway, models, data, report, difftest, judge, plugins):
    group.register(app)


def main() -> None:  # pragma: no cover
    sys.exit(app())

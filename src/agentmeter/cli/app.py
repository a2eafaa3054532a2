"""The ``agentmeter`` program: the typer app and its command groups, one module each.

Thin: each command parses its options, calls the packages and prints. The root group builds a
command only when it is used (:mod:`agentmeter.cli.lazygroup`), and help is plain text unless
standard output is a terminal.
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
from agentmeter.cli.lazygroup import LazyGroup, markup_mode


class _Commands(LazyGroup):
    modules = (run, tasks, setup, analysis, gateway, models, data, report, difftest, judge,
               plugins)


app = typer.Typer(help="Evaluate deployed agent configurations (model × agent) on local tasks "
                  "in sandboxes, measuring success and cost together.", no_args_is_help=True,
                  cls=_Commands, rich_markup_mode=markup_mode(sys.stdout.isatty()))


def _version(value: bool) -> None:
    if value:
        from agentmeter import __version__

        print(f"agentmeter {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Evaluate deployed agent configurations (model × agent) on local tasks in sandboxes."""


def main() -> None:  # pragma: no cover
    sys.exit(app())

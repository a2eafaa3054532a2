"""``agentmeter plugins``: the agents, verifier kinds, metrics and sandbox backends installed as
package entry points, and the packages they come from (docs/plugins.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from agentmeter.cli.common import JsonOpt, console


def plugins_cmd(
    load: Annotated[bool, typer.Option(
        "--load", help="also import each one, reporting those that fail")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List plug-ins installed as package entry points (groups agentmeter.agents,
    agentmeter.verifiers, agentmeter.metrics, agentmeter.sandbox_backends) and where from.
    Agent files (-a ./agent.toml) and import paths (package.module:Name) need no installing."""
    from rich.table import Table

    from agentmeter import plugins

    found = plugins.installed()
    problems: dict[tuple[str, str], str] = {}
    if load:
        for p in found:
            try:
                plugins.load_entry_point(p.kind, p.name)
            except plugins.PluginError as e:
                problems[(p.group, p.name)] = str(e)
    if as_json:
        print(json.dumps([{"kind": p.kind, "group": p.group, "name": p.name, "value": p.value,
                           "distribution": p.distribution, "location": p.location,
                           **({"problem": problems[(p.group, p.name)]}
                              if (p.group, p.name) in problems else {})} for p in found],
                         indent=1))
        return
    if not found:
        console.print("no plug-ins installed (entry point groups: "
                      f"{', '.join(plugins.GROUPS.values())})")
        return
    table = Table(title="installed plug-ins")
    for col in ("kind", "name", "object", "package", "location"):
        table.add_column(col)
    for p in found:
        table.add_row(p.kind, p.name, p.value, p.distribution, p.location)
    console.print(table)
    for (group, name), why in problems.items():
        console.print(f"[red]{group} {name}[/red]: {why}")
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins_cmd)

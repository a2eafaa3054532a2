"""What every ``agentmeter`` command module shares: consoles, common options, error exit."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentmeter.paths import default_runs_dir

if TYPE_CHECKING:
    from rich.console import Console

    from agentmeter.store.db import Store

# Start-up: ``agentmeter --help`` imports every command module, so these modules import only
# typer and light agentmeter modules at the top; each command imports what it works with (rich's
# tables, the store, metrics, the runner, ...) in its body (tests/test_cli_start.py guards this).


class LazyConsole:
    """A rich ``Console`` made on first use (importing rich.console costs ≈ 30 ms, which help and
    ``run`` up to its work do without); attributes are the console's."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def made(self) -> Console:
        """The console itself (for rich objects that take one, e.g. ``Progress(console=...)``)."""
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            # logs and CI capture get a wide table instead of rich's 80-column default
            self._console = Console(stderr=self._stderr,
                                    width=None if stream.isatty() else (160 if self._stderr else 200))
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made, name)


console = LazyConsole(stderr=False)
err = LazyConsole(stderr=True)


def escape(text: str) -> str:
    """``text`` shown as it is in rich markup (its ``[...]`` are not tags)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)

StoreOpt = Annotated[Path | None, typer.Option("--store", help="runs directory (default ./.agentmeter)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
AllowHostNetworkOpt = Annotated[bool, typer.Option(
    "--allow-host-network", help="let an exact allowed_hosts entry (127.0.0.1:8080, localhost, "
    "10.0.0.5) reach this host's own or an internal address; without it a task listing one is "
    "refused, and '*', wildcards and public networks never reach them")]
DatasetOpt = Annotated[list[str] | None, typer.Option(
    "--dataset", "-d", metavar="NAME[@VERSION]",
    help="a dataset of Harbor's registry (see --registry): its tasks are fetched from their git "
    "repositories at the pinned commits into the cache (offline runs reuse it) and run as a "
    "suite; without @VERSION: 'head', else the highest version, as Harbor; repeatable")]
RegistryOpt = Annotated[str | None, typer.Option(
    "--registry", metavar="URL|FILE",
    help="the registry.json -d reads (a URL or a file; default: Harbor's)")]
NetworkDefaultOpt = Annotated[str, typer.Option(
    "--network-default", metavar="none|public",
    help="the network of tasks that state none (Harbor's task.toml without network_mode, "
    "allowed_hosts or allow_internet; Terminal-Bench tasks): public (Harbor's default, through "
    "the harness's proxy, never this host) or none; a task that states its network keeps it")]


def fail(message: str) -> typer.Exit:
    """Print ``message`` as an error (as it is: ``[...]`` in it is text, not markup); raise the
    returned Exit (status 2)."""
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def open_store(store: Path | None) -> Store:
    """The store of ``--store DIR`` (default ./.agentmeter): SQLite in DIR, or the database at
    ``$AGENTMETER_DATABASE_URL`` (e.g. PostgreSQL) with the artifacts still under DIR."""
    from agentmeter.store.db import Store, StoreError

    runs_dir = store or default_runs_dir()
    url = os.environ.get("AGENTMETER_DATABASE_URL")
    try:
        return Store.open(url, runs_dir=runs_dir) if url else Store.open(runs_dir)
    except StoreError as e:
        raise fail(str(e)) from None

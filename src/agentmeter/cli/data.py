"""Data commands: ``import`` (Harbor jobs, Terminal-Bench runs, CLI-Tool-Bench results, tables) and ``export``
(CSV, JSONL, Parquet, ATIF trajectories). Thin: parse, call importers/exporters/store, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentmeter.cli.common import JsonOpt, StoreOpt, console, err, fail, open_store

if TYPE_CHECKING:
    from agentmeter.store.db import Store

# --- import / export -----------------------------------------------------------------------

def _export_atif(st: Store, run_id: str, out: Path | None) -> None:
    from agentmeter.exporters.atif import atif_export, write_atif
    from agentmeter.importers.common import ImportFormatError
    from agentmeter.store.db import StoreError

    if out is None:
        raise fail("--format atif writes one file per trial try: give a directory with -o DIR")
    try:
        export = atif_export(st, run_id)
        written = write_atif(export, out)
    except (ImportFormatError, StoreError) as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{out}: {e.strerror or e}") from None
    err.print(f"[dim]{len(written)} ATIF trajectories written to {out}[/dim]")
    if export.skipped:
        err.print(f"[dim]skipped {len(export.skipped)} unfinished tries: " + ", ".join(
            f"{t}#{n} ({status})" for t, n, status in export.skipped) + "[/dim]")


def import_cmd(
    path: Annotated[Path, typer.Argument(help="Harbor job dir, Terminal-Bench run dir, "
                                              "CLI-Tool-Bench results_metadata_with_sp.json, "
                                              "or a .csv/.jsonl/.parquet table")],
    fmt: Annotated[str | None, typer.Option("--format", help="harbor | terminal-bench | "
                                                             "clitoolbench | table (default: "
                                                             "detected)")] = None,
    mapping: Annotated[Path | None, typer.Option(help="TOML column/status mapping")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="id of the new run")] = None,
    categories: Annotated[Path | None, typer.Option(
        "--categories", help="clitoolbench: the released category.json (task domains)")] = None,
    include_excluded: Annotated[bool, typer.Option(
        "--include-excluded", help="clitoolbench: keep rows of the 6 repositories the "
        "publisher excluded")] = False,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Import another harness's results as a run (source = the importer, status imported)."""
    from agentmeter.importers import ImportFormatError, Mapping, load_import, save_import
    from agentmeter.store.db import StoreError

    try:
        m = Mapping.load(mapping) if mapping else None
        imported = load_import(path, fmt, m, run_id, categories, include_excluded)
        st = open_store(store)
        save_import(st, imported)
    except (ImportFormatError, StoreError) as e:
        raise fail(str(e)) from None
    counts: dict[str, int] = {}
    for t in imported.trials:
        counts[t.status.value] = counts.get(t.status.value, 0) + 1
    run = imported.run
    if as_json:
        print(json.dumps({"run_id": run.id, "source": run.source, "trials": len(imported.trials),
                          "configs": [c.label for c in imported.configs],
                          "tasks": len(imported.tasks), "statuses": counts,
                          "notes": imported.notes}, indent=1))
        return
    console.print(f"imported run [bold]{run.id}[/bold] from {path} ({run.source}): "
                  f"{len(imported.trials)} trials, {len(imported.tasks)} tasks, "
                  f"{len(imported.configs)} configurations")
    for c in imported.configs:
        console.print(f"  {c.label}")
    console.print("  statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for note in imported.notes:
        console.print(f"  [yellow]note: {note}[/yellow]")
    console.print(f"[dim]next: agentmeter score {run.id}[/dim]")


def export_cmd(
    run_id: Annotated[str, typer.Argument(help="run id")],
    fmt: Annotated[str, typer.Option("--format", help="csv | jsonl | parquet | atif (Harbor's "
                                                      "trajectory format, one file per try)")] = "csv",
    out: Annotated[Path | None, typer.Option("--output", "-o", help="file (default: stdout); a "
                                                                    "directory for atif")] = None,
    store: StoreOpt = None,
) -> None:
    """Export a run, one row per trial try (config, model, agent, task, tier, status, reward,
    tokens, cost, calls, timings), or with --format atif one ATIF trajectory per trial try."""
    from agentmeter.exporters.table import export_rows, write_table
    from agentmeter.importers.common import ImportFormatError
    from agentmeter.store.db import StoreError

    st = open_store(store)
    if fmt == "atif":
        _export_atif(st, run_id, out)
        return
    try:
        rows = export_rows(st, run_id)
        data = write_table(rows, fmt, out)
    except (ImportFormatError, StoreError) as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{out}: {e.strerror or e}") from None
    if data is not None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        err.print(f"[dim]{len(rows)} rows written to {out}[/dim]")


def register(app: typer.Typer) -> None:
    app.command("import")(import_cmd)
    app.command("export")(export_cmd)

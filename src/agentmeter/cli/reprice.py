"""``agentmeter reprice``: a stored run's costs recomputed under other pricing snapshots
(pricing/reprice.py). Thin: parse, call, print. Registered with the analysis commands
(analysis.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agentmeter.cli.common import JsonOpt, StoreOpt, console, err, fail, open_store


def reprice_cmd(
    run_id: Annotated[str, typer.Argument(help="run id")],
    prices: Annotated[list[Path], typer.Option("--prices", help="pricing snapshot TOML; "
                                               "repeatable (later files win)")],
    allow_unpriced: Annotated[bool, typer.Option(help="store n/a costs for models the "
                                                 "snapshot does not price")] = False,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Recompute stored costs (model calls and trial totals, Eq. 2) under another pricing
    snapshot without rerunning, and record the snapshot on the run."""
    from agentmeter.pricing.reprice import RepriceError, reprice_run
    from agentmeter.pricing.snapshot import PricingError, PricingSnapshot

    try:
        snaps = [PricingSnapshot.load(p) for p in prices]
    except PricingError as e:
        raise fail(str(e)) from None
    st = open_store(store)
    if st.get_run(run_id) is None:
        raise fail(f"no run {run_id!r} in {st.where}")
    try:
        result = reprice_run(st, run_id, snaps, [str(p) for p in prices],
                             allow_unpriced=allow_unpriced)
    except RepriceError as e:
        raise fail(f"{', '.join(map(str, prices))}: {e}") from None
    if as_json:
        print(json.dumps(result.model_dump(), indent=1))
        return
    from rich.table import Table

    table = Table("configuration", "USD before", "USD after",
                  title=f"run {run_id} repriced under {result.pricing_snapshot}", title_justify="left")
    for r in result.configs:
        table.add_row(r.label, *("n/a" if v is None else f"{v:.4f}"
                                 for v in (r.usd_before, r.usd_after)))
    console.print(table)
    err.print(f"[dim]{result.trials} trial tries and {result.model_calls} model calls "
              "repriced[/dim]")
    for u in result.unpriced:
        err.print(f"[yellow]no price[/yellow] {u}: costs stored as n/a")

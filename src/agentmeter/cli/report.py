"""Report commands: ``report`` (terminal leaderboard, or a self-contained HTML file) and
``view`` (the local web viewer). Wired into the app with :func:`register`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentmeter.cli.common import console, err, fail, open_store
from agentmeter.metrics import TIERS, ConfigRow, Scorecard, ScoringSpec
from agentmeter.report.html import collect, write_html_report
from agentmeter.report.html.collect import DEFAULT_RESAMPLES, ReportData
from agentmeter.report.scorecard_table import details
from agentmeter.store.db import StoreError

NA = "n/a"
SORTS = ("ams", "pass", "usd", "tok")


def sort_rows(card: Scorecard, by: str) -> list[ConfigRow]:
    """Leaderboard order: AMS / pass rate high first, USD / tokens per pass low first; n/a last."""
    def key(r: ConfigRow) -> tuple[bool, float, str]:
        value = {"ams": r.ams, "pass": r.pass_rate, "usd": r.usd_per_pass,
                 "tok": r.tok_per_pass}[by]
        high = by in ("ams", "pass")
        return value is None, -(value or 0.0) if high else (value or 0.0), r.label

    return sorted(card.rows, key=key)


def _f(v: float | None, fmt: str = ".3f") -> str:
    return NA if v is None else format(v, fmt)


def leaderboard_table(data: ReportData, by: str) -> Table:
    card = data.card
    assert card is not None
    scripted = {c.id for c in data.configs if c.scripted}
    level = f" [{card.bootstrap.level:.0%} CI]" if card.bootstrap else ""
    table = Table(title=f"leaderboard: {', '.join(data.run_ids)} ({card.n_tasks} tasks, sorted "
                        f"by {by})", title_justify="left")
    for name in ("#", "configuration", "Pass", *(f"{g} pass" for g in TIERS), "Tok/Pass",
                 "USD/Pass", *(f"S_{g}" for g in TIERS), f"AMS{level}", "Δbest"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    best = set(card.winners.ams)
    for i, r in enumerate(sort_rows(card, by), start=1):
        ci = r.ci.get("ams")
        ams = _f(r.ams) + (f" [{ci.low:.3f}, {ci.high:.3f}]" if ci else "")
        table.add_row(
            str(i), r.label + (" [dim](scripted test model)[/dim]" if r.config_id in scripted
                               else ""),
            f"{r.passes}/{r.n_tasks} {_f(r.pass_rate, '.0%')}" if r.n_scored else NA,
            *(f"{r.tiers[g].passes}/{r.tiers[g].n_counted}" if r.tiers[g].n_counted else NA
              for g in TIERS),
            NA if r.tok_per_pass is None else f"{r.tok_per_pass:,.0f}",
            NA if r.usd_per_pass is None else f"{r.usd_per_pass:.4f}",
            *(_f(r.tiers[g].score) for g in TIERS),
            f"[bold]{ams}[/bold]" if r.config_id in best else ams, _f(r.delta_best))
    return table


def _details(card: Scorecard) -> None:
    console.print(details(card))


def report_cmd(
    runs: Annotated[list[str], typer.Argument(help="run id(s); several are pooled")],
    sort: Annotated[str, typer.Option("--sort", help="ams | pass | usd | tok")] = "ams",
    html: Annotated[Path | None, typer.Option("--html", help="write a self-contained HTML "
                                              "report to this file")] = None,
    tiers: Annotated[str, typer.Option(help="calibrate | stored")] = "calibrate",
    resamples: Annotated[int, typer.Option(help="bootstrap resamples for CIs (0 = none)")]
    = DEFAULT_RESAMPLES,
    store: Annotated[Path | None, typer.Option("--store", help="runs directory")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """The leaderboard of runs (Pass, per-tier passes, Tok/Pass, USD/Pass, tier scores, AMS with
    CI, Δbest) in the terminal, or with --html a self-contained report file."""
    if sort not in SORTS:
        raise fail(f"--sort {sort!r}: use one of {', '.join(SORTS)}")
    if tiers not in ("calibrate", "stored"):
        raise fail(f"--tiers {tiers!r}: use calibrate or stored")
    if resamples < 0:
        raise fail("--resamples must be >= 0")
    spec = ScoringSpec(tiers=tiers, resamples=resamples)  # type: ignore[arg-type]
    st = open_store(store)
    try:
        if html is not None:
            path = write_html_report(st, runs, html, spec)
            if as_json:
                print(json.dumps({"runs": runs, "html": str(path), "bytes": path.stat().st_size}))
            else:
                console.print(f"HTML report: {path}")
            return
        data = collect(st, runs, spec)
    except StoreError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{html}: cannot write: {e.strerror or e}") from None
    if as_json:
        print(json.dumps({"runs": runs, "sort": sort, "scorecard": None if data.card is None
                          else data.card.model_dump(mode="json"),
                          "scripted_configs": [c.id for c in data.configs if c.scripted],
                          "problems": data.problems}, indent=1))
        return
    if data.card is None:
        console.print(f"leaderboard: n/a — {'; '.join(data.problems) or 'nothing scored'}")
        return
    console.print(leaderboard_table(data, sort))
    _details(data.card)


def view_cmd(
    port: Annotated[int, typer.Option(help="TCP port")] = 8765,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    store: Annotated[Path | None, typer.Option("--store", help="runs directory")] = None,
) -> None:
    """Browse the store in a local web viewer: runs, leaderboards, charts, trials; pages update
    live while a run is in progress."""
    from agentmeter.report.viewer import serve

    st = open_store(store)
    try:
        asyncio.run(serve(st, host, port, announce=lambda url: err.print(
            f"agentmeter viewer on [bold]{url}[/bold] (store {st.where}); Ctrl-C to stop")))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    finally:
        st.close()


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
    app.command("view")(view_cmd)

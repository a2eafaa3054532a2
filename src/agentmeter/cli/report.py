"""Report commands: ``report`` (terminal leaderboard, or a self-contained HTML file) and
``view`` (the local web viewer). Wired into the app with :func:`register`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agentmeter.cli.analysis import DupOpt, InfraOpt, choice
from agentmeter.cli.common import console, err, fail, open_store
from agentmeter.metrics.choices import DUPLICATE_BUDGETS, INFRA_POLICIES, LEADERBOARD_SORTS
from agentmeter.report.defaults import DEFAULT_RESAMPLES


def report_cmd(
    runs: Annotated[list[str], typer.Argument(help="run id(s); several are pooled")],
    sort: Annotated[str, typer.Option("--sort", help=" | ".join(LEADERBOARD_SORTS))] = "ams",
    html: Annotated[Path | None, typer.Option("--html", help="write a self-contained HTML "
                                              "report to this file")] = None,
    tiers: Annotated[str, typer.Option(help="calibrate | stored")] = "calibrate",
    resamples: Annotated[int, typer.Option(help="bootstrap resamples for CIs (0 = none)")]
    = DEFAULT_RESAMPLES,
    infra_invalid: InfraOpt = "zero", duplicate_budgets: DupOpt = "keep",
    store: Annotated[Path | None, typer.Option("--store", help="runs directory")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """The leaderboard of runs (Pass, per-tier passes, Tok/Pass, USD/Pass, tier scores, AMS with
    CI, Δbest) in the terminal, or with --html a self-contained report file."""
    from agentmeter.metrics.scoring import ScoringSpec
    from agentmeter.report.html import collect, write_html_report
    from agentmeter.report.scorecard_table import details, leaderboard
    from agentmeter.store.db import StoreError

    if sort not in LEADERBOARD_SORTS:
        raise fail(f"--sort {sort!r}: use one of {', '.join(LEADERBOARD_SORTS)}")
    if tiers not in ("calibrate", "stored"):
        raise fail(f"--tiers {tiers!r}: use calibrate or stored")
    if resamples < 0:
        raise fail("--resamples must be >= 0")
    choice("--infra-invalid", infra_invalid, INFRA_POLICIES)
    choice("--duplicate-budgets", duplicate_budgets, DUPLICATE_BUDGETS)
    spec = ScoringSpec.model_validate({"tiers": tiers, "resamples": resamples,
                                       "infra_invalid": infra_invalid,
                                       "duplicate_budgets": duplicate_budgets})
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
    # the leaderboard score prints, with the scripted configurations the store knows of (by
    # name or by served calls) and without the pass-rate interval (the AMS one is shown)
    console.print(leaderboard(
        data.card, f"leaderboard: {', '.join(data.run_ids)} ({data.card.n_tasks} tasks, sorted "
                   f"by {sort})", by=sort, scripted=[c.id for c in data.configs if c.scripted],
        pass_interval=False))
    console.print(details(data.card))


def view_cmd(
    port: Annotated[int, typer.Option(help="TCP port")] = 8765,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    store: Annotated[Path | None, typer.Option("--store", help="runs directory")] = None,
) -> None:
    """Browse the store in a local web viewer: runs, leaderboards, charts, trials; pages update
    live while a run is in progress."""
    import asyncio

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

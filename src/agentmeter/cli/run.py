"""``agentmeter run``, ``resume``, ``runs``, ``show``: running a grid and looking at its results."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentmeter.cli.common import (
    AllowHostNetworkOpt,
    DatasetOpt,
    JsonOpt,
    NetworkDefaultOpt,
    RegistryOpt,
    StoreOpt,
    console,
    err,
    escape,
    fail,
    open_store,
)

if TYPE_CHECKING:
    from agentmeter.records import TrialRecord
    from agentmeter.runner.executor import RunProgress
    from agentmeter.runner.session import PreparedRun
    from agentmeter.store.db import Store
    from agentmeter.tasks.suite import SkippedTask

ExecutorOpt = Annotated[str, typer.Option(
    help="where trials run: local (this machine) or ray (a Ray cluster's nodes, which declare "
    "agentmeter_slots: how many trials each runs at once, --concurrency is not used; needs a "
    "PostgreSQL store: AGENTMETER_DATABASE_URL)")]
RayAddressOpt = Annotated[str, typer.Option(
    help="with --executor ray: auto, HOST:PORT (the head's GCS) or ray://HOST:PORT")]


def execute_run(prepared: PreparedRun, store_dir: Path | None, run_id: str | None,
             as_json: bool) -> tuple[Store, str, RunProgress]:
    """Run ``prepared``; nothing is written (not even an empty store) when the run id or the
    backend is refused."""
    import asyncio
    import signal

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from agentmeter import notices
    from agentmeter.records import TrialStatus
    from agentmeter.runner.session import RunSetupError, check_run_id, make_backend, run

    started = time.monotonic()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("passed {task.fields[passed]}  spend ${task.fields[spend]:.4f}"),
                  TimeRemainingColumn(), console=err.made, disable=as_json, transient=False) as bar:
        job = bar.add_task("preparing", total=None, passed=0, spend=0.0)

        def on_prepare(what: str) -> None:
            bar.update(job, description=f"preparing {what}")

        shown: set[str] = set()

        def on_progress(p: RunProgress, rec: TrialRecord | None) -> None:
            bar.update(job, description="running", total=p.total, completed=p.done,
                       passed=p.passed, spend=p.spend_usd)
            if rec is not None and rec.status is TrialStatus.INFRA_INVALID:
                error = rec.error or ""
                # the whole message (e.g. an installer's last lines) once, its first line after
                text = error.splitlines()[0][:200] if error in shown else error
                shown.add(error)
                bar.console.print(f"[yellow]infra_invalid[/yellow] {rec.id} try {rec.try_number}: ",
                                  escape(text), sep="")

        def log(line: str) -> None:
            bar.console.print(f"[dim]{line}[/dim]")

        # notices (notices.py: a FROM built on the Debian base, …) print above the bar
        notices.set_sink(None if as_json else
                         lambda text: bar.console.print(f"[yellow]note:[/yellow] {escape(text)}"))

        try:
            if run_id is not None:
                check_run_id(run_id)
            # a cluster's nodes bring their own sandboxes (checked by the executor's pre-flight)
            backend = (make_backend(prepared.request.backend, log)
                       if prepared.request.executor == "local" else None)
        except RunSetupError as e:
            raise fail(str(e)) from None
        store = open_store(store_dir)

        async def main() -> tuple[str, RunProgress]:
            # SIGTERM (a scheduler stopping us) ends the run as cleanly as Ctrl-C does
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            return await run(store, prepared, run_id, backend=backend, on_progress=on_progress,
                             on_prepare=on_prepare)

        try:
            run_id, progress = asyncio.run(main())
        except (KeyboardInterrupt, asyncio.CancelledError):
            err.print("[yellow]interrupted[/yellow]: completed trials are stored; "
                      "continue with [bold]agentmeter resume[/bold]")
            raise typer.Exit(130) from None
        except RunSetupError as e:
            raise fail(str(e)) from None
    if not as_json:
        err.print(f"[dim]{progress.done} trials ({progress.skipped} already complete) in "
                  f"{time.monotonic() - started:.1f}s[/dim]")
    return store, run_id, progress


def loader_notices(prepared: PreparedRun) -> list[str]:
    """Every task's loader notes, each once (``--json`` carries them as ``"notices"``)."""
    return list(dict.fromkeys(n for t in prepared.tasks for n in t.loader_notes))


def report_loading(prepared: PreparedRun, as_json: bool) -> None:
    """Before a run: each task's loader notes once, and the tasks that were skipped, why."""
    if as_json:
        return
    for note in loader_notices(prepared):
        err.print(f"[dim]note: {escape(note)}[/dim]")
    if prepared.skipped:
        total = len(prepared.tasks) + len(prepared.skipped)
        err.print(f"[yellow]skipped {len(prepared.skipped)} of {total} tasks[/yellow] that cannot "
                  f"run ({len(prepared.tasks)} run; --strict refuses the run instead):")
        for k in prepared.skipped:
            err.print(f"  [yellow]{escape(k.id)}[/yellow]: {escape(k.reason)}")


def exit_on_build_failures(progress: RunProgress) -> None:
    """A run whose environments did not build exits 1 (after its results are printed)."""
    if progress.build_failures:
        n = len(progress.build_failures)
        err.print(f"[red]error:[/red] {n} environment{'s' if n > 1 else ''} failed to build; "
                  "their trials are infra_invalid (see above)")
        raise typer.Exit(1)


def print_results(store: Store, run_id: str, as_json: bool,
                  skipped: list[SkippedTask] | None = None,
                  notices: list[str] | None = None) -> None:
    from agentmeter.report.summary import summarize, summary_table

    rows = summarize(store, run_id)
    if as_json:
        print(json.dumps({"run_id": run_id, "configs": [
            {**r.model_dump(mode="json"), "pass_rate": r.pass_rate} for r in rows],
            "skipped": [{"task": k.id, "path": str(k.path), "problems": list(k.problems)}
                        for k in skipped or []],
            "notices": notices or []}, indent=1))
        return
    console.print(summary_table(rows, f"run {run_id}"))
    console.print(f"[dim]store: {store.run_dir(run_id)}  ·  details: agentmeter show {run_id}[/dim]")



def run_cmd(
    suite: Annotated[list[str] | None, typer.Option(
        "--suite", "-s", help="suite dir, task dir or built-in name (default: starter, "
        "unless -d is given); repeatable")] = None,
    dataset: DatasetOpt = None, registry: RegistryOpt = None,
    agent: Annotated[list[str], typer.Option(
        "--agent", "-a", help="agent name\\[@version], e.g. codex@0.169.0, an agent file "
        "./agent.toml, package.module:Class or an installed plug-in (agentmeter plugins); "
        "repeatable")] = ["oracle"],  # noqa: B006
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="model; repeatable (grid)")] = None,
    pair: Annotated[list[str] | None, typer.Option(
        "--pair", help="one configuration AGENT=MODEL; repeatable")] = None,
    grid: Annotated[Path | None, typer.Option(
        help="grid TOML: agents, models, \\[\\[pairs]], \\[agent_options.NAME]")] = None,
    subset: Annotated[str | None, typer.Option(help="named subset of the suite")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="task id; repeatable")] = None,
    attempts: int = 1, concurrency: Annotated[int, typer.Option("--concurrency", "-c")] = 2,
    backend: str = "local", run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    max_infra_retries: int = 2,
    models_file: Annotated[str | None, typer.Option(help="models TOML")] = None,
    prices: Annotated[list[str] | None, typer.Option(help="pricing snapshot TOML; repeatable")] = None,
    allow_unpriced: Annotated[bool, typer.Option(help="run models that have no price (cost n/a)")] = False,
    record_bodies: bool = False,
    judge_model: Annotated[str | None, typer.Option(
        "--judge-model", help="model the verifiers' judges use (e.g. semantic equivalence), "
        "metered as evaluation cost apart from the agent's; default: no judge")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="refuse the run when any task fails to load (default: skip such "
        "tasks, list each with its reason, run the rest)")] = False,
    allow_host_network: AllowHostNetworkOpt = False,
    network_default: NetworkDefaultOpt = "public",
    executor: ExecutorOpt = "local", ray_address: RayAddressOpt = "auto",
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Run agents (× models) on tasks. Re-running with the same --run-id resumes it."""
    from agentmeter.runner.session import RunSetupError, load_grid, make_request, prepare

    try:
        pairs = []
        for p in pair or []:
            a, sep, m = p.partition("=")
            if not sep or not a or not m:
                raise RunSetupError(f"--pair {p!r}: expected AGENT=MODEL")
            pairs.append((a, m))
        options: dict[str, dict[str, Any]] = {}
        if grid is not None:
            g = load_grid(grid)
            agent = [] if agent == ["oracle"] else agent  # the default yields to the grid file
            agent, model = agent + g.agents, (model or []) + g.models
            pairs += [(p["agent"], p["model"]) for p in g.pairs]
            options = g.agent_options
        suites = suite if suite is not None else [] if dataset else ["starter"]
        req = make_request(suites=suites, datasets=dataset or [], registry=registry,
                           subset=subset, task_ids=task or [], agents=agent,
                         models=model or [], pairs=pairs, agent_options=options,
                         attempts=attempts, concurrency=concurrency,
                         backend=backend, max_infra_retries=max_infra_retries,
                         models_file=models_file, prices=prices or [],
                         allow_unpriced=allow_unpriced, record_bodies=record_bodies,
                         judge_model=judge_model, strict=strict,
                         allow_host_network=allow_host_network,
                         network_default=network_default, executor=executor,
                         ray_address=ray_address)
        prepared = prepare(req)
    except (RunSetupError, ValueError) as e:
        raise fail(str(e)) from None
    report_loading(prepared, as_json)
    st, rid, progress = execute_run(prepared, store, run_id, as_json)
    print_results(st, rid, as_json, prepared.skipped, loader_notices(prepared))
    exit_on_build_failures(progress)


def resume(run_id: str, store: StoreOpt = None, concurrency: int | None = None,
           executor: Annotated[str | None, typer.Option(
               help="local or ray (default: the run's own)")] = None,
           ray_address: Annotated[str | None, typer.Option(
               help="the Ray cluster (default: the run's own)")] = None,
           as_json: JsonOpt = False) -> None:
    """Continue a run: completed trials are kept, incomplete ones run again."""
    from agentmeter.runner.session import (
        RunSetupError,
        check_run_id,
        make_request,
        prepare,
        request_of,
    )

    st = open_store(store)
    try:
        check_run_id(run_id)
        req = request_of(st, run_id)
        changes = {k: v for k, v in (("concurrency", concurrency), ("executor", executor),
                                     ("ray_address", ray_address)) if v is not None}
        if changes:
            req = make_request(**{**req.model_dump(), **changes})
        prepared = prepare(req)
    except RunSetupError as e:
        raise fail(str(e)) from None
    report_loading(prepared, as_json)
    st, rid, progress = execute_run(prepared, store, run_id, as_json)
    print_results(st, rid, as_json, prepared.skipped, loader_notices(prepared))
    exit_on_build_failures(progress)


def runs(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List runs in the store."""
    from rich.table import Table

    from agentmeter.records import TrialStatus

    st = open_store(store)
    records = st.list_runs()
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=1))
        return
    table = Table("run", "created", "status", "backend", "trials", "passed")
    for r in records:
        trials = st.latest_completed_trials(r.id)
        table.add_row(r.id, r.created_at.strftime("%Y-%m-%d %H:%M"), r.status, r.backend,
                      str(len(trials)), str(sum(t.status is TrialStatus.PASSED for t in trials)))
    console.print(table)


def show(run_id: str, trial: Annotated[str | None, typer.Option("--trial")] = None,
         store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Show a run's results, or one trial in detail."""
    from rich.table import Table

    st = open_store(store)
    if st.get_run(run_id) is None:
        raise fail(f"no run {run_id!r} in {st}")
    if trial is None:
        print_results(st, run_id, as_json)
        if not as_json:
            trials = sorted(st.latest_completed_trials(run_id), key=lambda t: t.id)
            judged = any("evaluation" in t.extra for t in trials)
            cols = ["trial", "status", "reward", "calls", "USD"]
            table = Table(*cols, *(["judge USD"] if judged else []), "error", title="trials")
            for t in trials:
                cells = [t.id, t.status.value, "n/a" if t.reward is None else f"{t.reward:g}",
                         str(t.model_calls), "n/a" if t.cost_usd is None else f"{t.cost_usd:.4f}"]
                if judged:
                    cells.append(_judge_usd(t))
                table.add_row(*cells, (t.error or "").splitlines()[0][:60] if t.error else "")
            console.print(table)
        return
    rec = st.get_trial(run_id, trial)
    if rec is None:
        raise fail(f"no trial {trial!r} in run {run_id}")
    calls = st.model_calls(run_id, trial, rec.try_number)
    arts = st.artifacts(run_id, trial, rec.try_number)
    data: dict[str, Any] = {"trial": rec.model_dump(mode="json"),
                            "model_calls": [c.model_dump(mode="json") for c in calls],
                            "artifacts": [a.model_dump(mode="json") for a in arts]}
    if as_json:
        print(json.dumps(data, indent=1))
        return
    console.print_json(json.dumps(data["trial"]))
    for c in calls:
        who = " (judge)" if c.purpose == "judge" else ""
        console.print(f"call {c.seq}{who}: {c.client_api}→{c.wire_api} {c.upstream_model} {c.status_code} "
                      f"{c.latency_s * 1000:.0f} ms usage={c.usage.model_dump(exclude_none=True)}"
                      + (f" error={escape(c.error)}" if c.error else ""))  # e.g. its fate at run end
    for a in arts:
        console.print(f"artifact {a.name} ({a.kind}, {a.size} B): {st.run_dir(run_id) / a.relpath}")


def _judge_usd(t: TrialRecord) -> str:
    """A try's evaluation (judge) cost, '-' when it was not judged."""
    ev = t.extra.get("evaluation")
    if not isinstance(ev, dict):
        return "-"
    cost = ev.get("cost_usd")
    return f"{cost:.4f}" if isinstance(cost, (int, float)) else "n/a"


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command()(resume)
    app.command()(runs)
    app.command()(show)

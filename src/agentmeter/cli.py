"""The ``agentmeter`` command. Thin: parses, calls the packages, prints."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agentmeter.cli_analysis import register as register_analysis
from agentmeter.cli_common import JsonOpt, StoreOpt, console, err, fail, open_store
from agentmeter.cli_data import register as register_data
from agentmeter.cli_gateway import register as register_gateway
from agentmeter.cli_report import register as register_report
from agentmeter.report.summary import summarize, summary_table
from agentmeter.runner.executor import RunProgress
from agentmeter.runner.session import (
    PreparedRun,
    RunRequest,
    RunSetupError,
    load_grid,
    prepare,
    request_of,
    run,
)
from agentmeter.store.db import Store
from agentmeter.store.models import TrialRecord, TrialStatus
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.suite import load_suite

app = typer.Typer(help="Evaluate deployed agent configurations (model × agent) on local tasks "
                  "in sandboxes, measuring success and cost together.", no_args_is_help=True)
tasks_app = typer.Typer(help="Inspect and check task suites.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")

def _version(value: bool) -> None:
    if value:
        from agentmeter import __version__

        print(f"agentmeter {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Evaluate deployed agent configurations (model × agent) on local tasks in sandboxes."""




def _execute(prepared: PreparedRun, store_dir: Path | None, run_id: str | None,
             as_json: bool) -> tuple[Store, str, RunProgress]:
    store = open_store(store_dir)
    started = time.monotonic()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("passed {task.fields[passed]}  spend ${task.fields[spend]:.4f}"),
                  TimeRemainingColumn(), console=err, disable=as_json, transient=False) as bar:
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

        async def main() -> tuple[str, RunProgress]:
            # SIGTERM (a scheduler stopping us) ends the run as cleanly as Ctrl-C does
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            return await run(store, prepared, run_id, on_progress=on_progress,
                             on_prepare=on_prepare, log=log)

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


def _print_results(store: Store, run_id: str, as_json: bool) -> None:
    rows = summarize(store, run_id)
    if as_json:
        print(json.dumps({"run_id": run_id, "configs": [
            {**r.model_dump(mode="json"), "pass_rate": r.pass_rate} for r in rows]}, indent=1))
        return
    console.print(summary_table(rows, f"run {run_id}"))
    console.print(f"[dim]store: {store.run_dir(run_id)}  ·  details: agentmeter show {run_id}[/dim]")


@app.command("run")
def run_cmd(
    suite: Annotated[list[str], typer.Option(
        "--suite", "-s", help="suite dir, task dir or built-in name")] = ["starter"],  # noqa: B006
    agent: Annotated[list[str], typer.Option(
        "--agent", "-a", help="agent name\\[@version], e.g. codex@0.169.0; repeatable")] = ["oracle"],  # noqa: B006
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
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Run agents (× models) on tasks. Re-running with the same --run-id resumes it."""
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
        req = RunRequest(suites=suite, subset=subset, task_ids=task or [], agents=agent,
                         models=model or [], pairs=pairs, agent_options=options,
                         attempts=attempts, concurrency=concurrency,
                         backend=backend, max_infra_retries=max_infra_retries,
                         models_file=models_file, prices=prices or [],
                         allow_unpriced=allow_unpriced, record_bodies=record_bodies)
        prepared = prepare(req)
    except (RunSetupError, ValueError) as e:
        raise fail(str(e)) from None
    st, rid, _ = _execute(prepared, store, run_id, as_json)
    _print_results(st, rid, as_json)


@app.command()
def resume(run_id: str, store: StoreOpt = None, concurrency: int | None = None,
           as_json: JsonOpt = False) -> None:
    """Continue a run: completed trials are kept, incomplete ones run again."""
    st = open_store(store)
    try:
        req = request_of(st, run_id)
        if concurrency:
            req = req.model_copy(update={"concurrency": concurrency})
        prepared = prepare(req)
    except RunSetupError as e:
        raise fail(str(e)) from None
    st, rid, _ = _execute(prepared, store, run_id, as_json)
    _print_results(st, rid, as_json)


@app.command()
def runs(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List runs in the store."""
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


@app.command()
def show(run_id: str, trial: Annotated[str | None, typer.Option("--trial")] = None,
         store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Show a run's results, or one trial in detail."""
    st = open_store(store)
    if st.get_run(run_id) is None:
        raise fail(f"no run {run_id!r} in {st}")
    if trial is None:
        _print_results(st, run_id, as_json)
        if not as_json:
            table = Table("trial", "status", "reward", "calls", "USD", "error", title="trials")
            for t in sorted(st.latest_completed_trials(run_id), key=lambda t: t.id):
                table.add_row(t.id, t.status.value, "n/a" if t.reward is None else f"{t.reward:g}",
                              str(t.model_calls), "n/a" if t.cost_usd is None else f"{t.cost_usd:.4f}",
                              (t.error or "").splitlines()[0][:60] if t.error else "")
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
        console.print(f"call {c.seq}: {c.client_api}→{c.wire_api} {c.upstream_model} {c.status_code} "
                      f"{c.latency_s * 1000:.0f} ms usage={c.usage.model_dump(exclude_none=True)}")
    for a in arts:
        console.print(f"artifact {a.name} ({a.kind}, {a.size} B): {st.run_dir(run_id) / a.relpath}")


@tasks_app.command("list")
def tasks_list(path: Annotated[str, typer.Argument(help="suite/task dir or built-in name")] = "starter",
               as_json: JsonOpt = False) -> None:
    """List the tasks of a suite."""
    try:
        suite = load_suite(path)
    except TaskError as e:
        raise fail(str(e)) from None
    if as_json:
        print(json.dumps([{"id": t.id, "tier": t.tier, "category": t.category, "format": t.format}
                          for t in suite.tasks], indent=1))
        return
    table = Table("task", "tier", "category", "format",
                  title=f"suite {suite.name} ({len(suite.tasks)} tasks)")
    for t in suite.tasks:
        table.add_row(t.id, t.tier or "-", t.category or "-", t.format)
    console.print(table)
    for name, ids in suite.subsets.items():
        console.print(f"subset [bold]{name}[/bold]: {', '.join(ids)}")


@tasks_app.command("show")
def tasks_show(task_id: str, suite: Annotated[str, typer.Option("--suite", "-s")] = "starter") -> None:
    """Show one task: metadata and instruction."""
    try:
        s = load_suite(task_id) if Path(task_id).is_dir() else load_suite(suite)
        t = s.tasks[0] if Path(task_id).is_dir() else s.task(task_id)
    except (TaskError, KeyError) as e:
        raise fail(str(e)) from None
    meta = t.model_dump(mode="json", exclude={"instruction"})
    console.print_json(json.dumps(meta))
    console.rule("instruction")
    console.print(t.instruction)


@tasks_app.command("check")
def tasks_check(path: Annotated[str, typer.Argument(help="suite/task dir or built-in name")] = "starter",
                backend: str = "local", concurrency: int = 2, store: StoreOpt = None,
                as_json: JsonOpt = False) -> None:
    """Run oracle and nop on every task: report broken tasks (oracle fails) and trivial ones
    (nop passes)."""
    try:
        prepared = prepare(RunRequest(suites=[path], agents=["oracle", "nop"], backend=backend,
                                      concurrency=concurrency))
    except RunSetupError as e:
        raise fail(str(e)) from None
    tmp = None
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="agentmeter-check-")
        store = Path(tmp.name)
    st, rid, _ = _execute(prepared, store, None, as_json)
    labels = {c.id: c.agent.name for c in st.run_configs(rid)}
    verdicts: dict[str, dict[str, TrialRecord]] = {}
    for t in st.latest_completed_trials(rid):
        verdicts.setdefault(t.task_id, {})[labels[t.config_id]] = t
    broken = sorted(k for k, v in verdicts.items() if v["oracle"].status is not TrialStatus.PASSED)
    trivial = sorted(k for k, v in verdicts.items() if v["nop"].status is TrialStatus.PASSED)
    if as_json:
        print(json.dumps({"tasks": len(verdicts), "broken": broken, "trivial": trivial}))
    else:
        for k in broken:
            o = verdicts[k]["oracle"]
            console.print(f"[red]broken[/red] {k}: oracle {o.status.value} "
                          f"(reward {o.reward}) {(o.error or '').splitlines()[0][:150] if o.error else ''}")
        for k in trivial:
            console.print(f"[yellow]trivial[/yellow] {k}: nop passes")
        ok = len(verdicts) - len(set(broken) | set(trivial))
        console.print(f"{ok}/{len(verdicts)} tasks valid")
    if tmp is not None:
        st.close()
        tmp.cleanup()
    if broken or trivial:
        raise typer.Exit(1)


@app.command()
def setup(docker: Annotated[bool, typer.Option(help="also start dockerd and import the base image")] = False,
          suite: Annotated[str, typer.Option(help="build this suite's environments")] = "starter",
          agents: Annotated[str | None, typer.Option(
              help="comma-separated agents to install into cached layers, e.g. codex,claude-code "
                   "(name@version pins a version)")] = None) -> None:
    """Install host tools and build, once, the Debian base, the suite's environment layers and
    the agents' installation layers. Everything is also built on first use."""
    from agentmeter.agents.registry import UnknownAgentError, make_agent
    from agentmeter.runner.trial import sandbox_spec
    from agentmeter.sandbox import rootfs
    from agentmeter.sandbox.local import LocalBackend
    from agentmeter.sandbox.spec import SandboxError, SandboxSpec

    try:
        with _setup_progress() as bar:
            base = bar.add_task("Debian base (debootstrap, once)", total=None, detail="")
            rootfs.ensure_debian_base(lambda line: bar.update(base, detail=escape(line[:70])))
            bar.update(base, total=1, completed=1, detail="ready")
        backend = LocalBackend()
        prepared = prepare(RunRequest(suites=[suite], agents=["oracle"]))
        specs = [(t.id, sandbox_spec(t, prepared.configs[0].agent, None)) for t in prepared.tasks]
        for name in [a.strip() for a in (agents or "").split(",") if a.strip()]:
            agent_name, _, version = name.partition("@")
            # agent layers are independent of the environment: built once on the base
            specs.append((f"agent {name}",
                          SandboxSpec(layers=tuple(make_agent(agent_name, version or None).layers()))))
        with _setup_progress() as bar:
            job = bar.add_task("environments and agents", total=len(specs), detail="")
            backend.layers.log = lambda line: bar.console.print(f"[dim]{escape(line)}[/dim]")
            for what, spec in specs:
                bar.update(job, detail=escape(what))
                asyncio.run(backend.prepare(spec))
                bar.advance(job)
            bar.update(job, detail="ready")
            specs_only = [spec for _, spec in specs]
        if docker:
            from agentmeter.sandbox.docker import DockerBackend
            from agentmeter.sandbox.dockerd import ensure_dockerd

            ensure_dockerd()
            for spec in specs_only:
                asyncio.run(DockerBackend().prepare(spec))
    except (SandboxError, RunSetupError, UnknownAgentError, ValueError) as e:
        raise fail(str(e)) from None
    err.print("[green]ready[/green]")


def _setup_progress() -> Progress:
    return Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[detail]}"),
                    console=err)


@app.command()
def demo(store: StoreOpt = None, concurrency: int = 2, as_json: JsonOpt = False,
         clis: Annotated[bool, typer.Option(help="also run the real agent CLIs grid")] = True) -> None:
    """Run the built-in demo. (1) The starter suite with the reference agents (oracle, nop) and
    the native agent driven by the scripted offline model — a labelled test double — with the
    solver, explorer and quitter policies. (2) A small grid on the suite's core subset: the native
    agent and the real Codex, Claude Code and Qwen Code CLIs (installed once into cached layers)
    × scripted solver / quitter. Ends with the results tables and an HTML report."""
    requests = [RunRequest(suites=["starter"], agents=["oracle", "nop", "native"],
                           models=["scripted/solver", "scripted/explorer", "scripted/quitter"],
                           concurrency=concurrency)]
    if clis:
        requests.append(RunRequest(suites=["starter"], subset="core",
                                   agents=["native", "codex", "claude-code", "qwen-code"],
                                   models=["scripted/solver", "scripted/quitter"],
                                   concurrency=concurrency))
    run_ids: list[str] = []
    for req in requests:
        try:
            prepared = prepare(req)
        except RunSetupError as e:
            raise fail(str(e)) from None
        st, rid, _ = _execute(prepared, store, None, as_json)
        _print_results(st, rid, as_json)
        run_ids.append(rid)
    from agentmeter.report.html import write_html_report

    for rid in run_ids:
        path = write_html_report(st, [rid], st.run_dir(rid) / "report.html")
        if not as_json:
            console.print(f"HTML report (open in a browser): {path}")


register_analysis(app)
register_gateway(app)
register_data(app)
register_report(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

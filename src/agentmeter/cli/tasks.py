"""``agentmeter tasks list|show|check|import``: inspect, validate and import task suites."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentmeter.cli.common import (
    AllowHostNetworkOpt,
    DatasetOpt,
    JsonOpt,
    NetworkDefaultOpt,
    RegistryOpt,
    StoreOpt,
    console,
    escape,
    fail,
)
from agentmeter.cli.run import execute_run, loader_notices, report_loading

if TYPE_CHECKING:
    from agentmeter.importers.agencybench import PromptMode
    from agentmeter.records import TrialRecord

tasks_app = typer.Typer(help="Inspect and check task suites.", no_args_is_help=True)


@tasks_app.command("list")
def tasks_list(path: Annotated[str, typer.Argument(help="suite/task dir or built-in name")] = "starter",
               dataset: DatasetOpt = None, registry: RegistryOpt = None,
               as_json: JsonOpt = False) -> None:
    """List the tasks of a suite (or of datasets of Harbor's registry: -d)."""
    from rich.table import Table

    from agentmeter.tasks.errors import TaskError
    from agentmeter.tasks.suite import Suite, combine_suites, load_suite

    try:
        if dataset:  # the registry's models and git fetching: only for -d
            from agentmeter.tasks.datasets import DatasetError, load_dataset

            try:
                suite: Suite = combine_suites([load_dataset(d, registry) for d in dataset])
            except DatasetError as e:
                raise fail(str(e)) from None
        else:
            suite = load_suite(path)
    except TaskError as e:
        raise fail(str(e)) from None
    if as_json:
        print(json.dumps([{"id": t.id, "tier": t.tier, "category": t.category, "format": t.format}
                          for t in suite.tasks], indent=1))
        return
    version = f"@{suite.version}" if dataset and suite.version else ""
    table = Table("task", "tier", "category", "format",
                  title=f"{'dataset' if dataset else 'suite'} {suite.name}{version} "
                  f"({len(suite.tasks)} tasks)")
    for t in suite.tasks:
        table.add_row(t.id, t.tier or "-", t.category or "-", t.format)
    console.print(table)
    for k in suite.skipped:
        console.print(f"[red]cannot run[/red] {escape(k.id)}: {escape(k.reason)}")
    for name, ids in suite.subsets.items():
        console.print(f"subset [bold]{name}[/bold]: {', '.join(ids)}")


@tasks_app.command("show")
def tasks_show(task_id: str, suite: Annotated[str, typer.Option("--suite", "-s")] = "starter") -> None:
    """Show one task: metadata and instruction."""
    from agentmeter.tasks.errors import TaskError
    from agentmeter.tasks.suite import load_suite

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
def tasks_check(path: Annotated[str | None, typer.Argument(
                    help="suite/task dir or built-in name (default: starter, unless -d)")] = None,
                dataset: DatasetOpt = None, registry: RegistryOpt = None,
                backend: str = "local", concurrency: int = 2, store: StoreOpt = None,
                strict: Annotated[bool, typer.Option(
                    "--strict", help="refuse to check anything when a task fails to load")] = False,
                allow_host_network: AllowHostNetworkOpt = False,
                network_default: NetworkDefaultOpt = "public",
                as_json: JsonOpt = False) -> None:
    """Run oracle and nop on every task: report broken tasks (oracle fails), trivial ones
    (nop passes) and those that cannot run (they fail to load: each with its reason)."""
    from agentmeter.records import TrialStatus
    from agentmeter.runner.session import RunSetupError, make_request, prepare

    try:
        suites = [path] if path is not None else [] if dataset else ["starter"]
        prepared = prepare(make_request(suites=suites, datasets=dataset or [], registry=registry,
                                        agents=["oracle", "nop"], backend=backend,
                                        concurrency=concurrency, strict=strict,
                                        allow_host_network=allow_host_network,
                                        network_default=network_default))
    except RunSetupError as e:
        raise fail(str(e)) from None
    report_loading(prepared, as_json)
    skipped = prepared.skipped
    tmp = None
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="agentmeter-check-")
        store = Path(tmp.name)
    st, rid, _ = execute_run(prepared, store, None, as_json)
    labels = {c.id: c.agent.name for c in st.run_configs(rid)}
    verdicts: dict[str, dict[str, TrialRecord]] = {}
    for t in st.latest_completed_trials(rid):
        verdicts.setdefault(t.task_id, {})[labels[t.config_id]] = t
    broken = sorted(k for k, v in verdicts.items() if v["oracle"].status is not TrialStatus.PASSED)
    trivial = sorted(k for k, v in verdicts.items() if v["nop"].status is TrialStatus.PASSED)
    if as_json:
        print(json.dumps({"tasks": len(verdicts) + len(skipped), "ran": len(verdicts),
                          "broken": broken, "trivial": trivial,
                          "skipped": [{"task": k.id, "path": str(k.path),
                                       "problems": list(k.problems)} for k in skipped],
                          "reasons": {k: _first_line(verdicts[k]["oracle"]) for k in broken},
                          "notices": loader_notices(prepared)}))
    else:
        for k in broken:
            console.print(f"[red]broken[/red] {k}: {escape(_first_line(verdicts[k]['oracle']))}")
        for k in trivial:
            console.print(f"[yellow]trivial[/yellow] {k}: nop passes")
        for sk in skipped:
            console.print(f"[red]cannot run[/red] {sk.id}: {escape(sk.reason)}")
        ok = len(verdicts) - len(set(broken) | set(trivial))
        console.print(f"{ok}/{len(verdicts) + len(skipped)} tasks valid ({len(verdicts)} ran, "
                      f"{len(skipped)} could not)")
    if tmp is not None:
        st.close()
        tmp.cleanup()
    if broken or trivial or skipped:
        raise typer.Exit(1)


def _first_line(oracle: TrialRecord) -> str:
    """Why the oracle did not pass, in one line."""
    first = oracle.error.splitlines()[0][:200] if oracle.error else ""
    return f"oracle {oracle.status.value} (reward {oracle.reward})" + (f": {first}" if first else "")


TASK_IMPORT_FORMATS = ("agencybench",)


@tasks_app.command("import")
def tasks_import(
    src: Annotated[Path, typer.Argument(help="a checkout of GAIR-NLP/AgencyBench (or its "
                                             "AgencyBench-v2 directory)")],
    dest: Annotated[Path, typer.Argument(help="new suite directory (must not exist or be "
                                              "empty)")],
    fmt: Annotated[str, typer.Option("--format", help="agencybench")] = "agencybench",
    prompt_mode: Annotated[str, typer.Option(
        "--prompt-mode", help="released (the released prompts; Research 3 shows its rubric) | "
        "query_only (object-shaped subtasks: query + deliverables)")] = "released",
    as_json: JsonOpt = False,
) -> None:
    """Write another benchmark's task definitions as agentmeter scenario directories."""
    from agentmeter.importers.agencybench import PROMPT_MODES, import_agencybench
    from agentmeter.importers.common import ImportFormatError

    if fmt not in TASK_IMPORT_FORMATS:
        raise fail(f"unknown task import format {fmt!r} ({', '.join(TASK_IMPORT_FORMATS)})")
    if prompt_mode not in PROMPT_MODES:
        raise fail(f"unknown prompt mode {prompt_mode!r} ({', '.join(PROMPT_MODES)})")
    mode: PromptMode = "query_only" if prompt_mode == "query_only" else "released"
    try:
        summary = import_agencybench(src, dest, mode)
    except ImportFormatError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{e.filename or dest}: {e.strerror or e}") from None
    if as_json:
        print(json.dumps({"dest": str(summary.dest), "scenarios": summary.scenarios,
                          "tasks": summary.tasks, "per_capability": {
                              k: {"scenarios": s, "tasks": t}
                              for k, (s, t) in sorted(summary.per_capability.items())},
                          "notes": summary.notes}, indent=1))
        return
    console.print(f"imported {summary.scenarios} scenarios / {summary.tasks} tasks into "
                  f"{summary.dest}")
    for cap, (s, t) in sorted(summary.per_capability.items()):
        console.print(f"  {cap}: {s} scenarios, {t} tasks")
    for note in summary.notes:
        console.print(f"  [yellow]note: {note}[/yellow]")


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")

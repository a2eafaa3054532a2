"""``agentmeter difftest``: CLI-generation tasks (CLI-Tool-Bench): ``synth`` builds a task's
frozen cases and prompt (synth/); ``run`` compares a given repository with a task's oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentmeter.cli.common import JsonOpt, StoreOpt, console, fail

if TYPE_CHECKING:
    from agentmeter.records import TrialRecord
    from agentmeter.runner.plan import PlannedConfig

difftest_app = typer.Typer(help="CLI-generation tasks: differential testing against an oracle.",
                           no_args_is_help=True)


@difftest_app.command("synth")
def synth(
    task_dir: Annotated[Path, typer.Argument(help="the task directory (task.toml with \\[difftest])")],
    seed: Annotated[int, typer.Option(help="seed of the case generation")] = 0,
    per_class: Annotated[int, typer.Option("--per-class", min=1,
                                           help="cases per command class (the paper: 50)")] = 50,
    from_start_py: Annotated[Path | None, typer.Option(
        "--from-start-py", help="replay a released start.py's case generator")] = None,
    from_help: Annotated[bool, typer.Option(
        "--from-help", help="draft the schema from the oracle's --help, walked in the task's "
        "environment")] = False,
    oracle: Annotated[bool, typer.Option(
        "--oracle/--no-oracle", help="run the cases against the oracle (twice) and keep the "
        "valid ones")] = True,
    model: Annotated[str | None, typer.Option(
        "--model", help="model-assisted: this model writes the schema from the oracle's help, "
        "refined by execution feedback (through the metering gateway; offline test double: "
        "scripted/schema-from-file)")] = None,
    max_refinements: Annotated[int, typer.Option(
        "--max-refinements", min=0, help="model-assisted: refinement rounds after the first")] = 5,
    prompt: Annotated[bool, typer.Option("--prompt", help="also render instruction.md")] = False,
    backend: Annotated[str, typer.Option(help="sandbox backend for the oracle run")] = "local",
) -> None:
    """Generate TASK_DIR/tests/cases.jsonl (seeded) and record how in tests/synth.json."""
    from rich.markup import escape

    from agentmeter.sandbox.spec import SandboxError
    from agentmeter.synth.build import Mode, SynthError, render_instruction, synthesize
    from agentmeter.synth.oracle import OracleRunError
    from agentmeter.synth.replay import ReplayError
    from agentmeter.synth.schema import SchemaError
    from agentmeter.tasks.errors import TaskError

    if sum((from_help, from_start_py is not None, model is not None)) > 1:
        raise fail("choose one of --from-help, --from-start-py and --model")
    mode: Mode = ("help" if from_help else "start_py" if from_start_py is not None
                  else "model" if model is not None else "schema")
    try:
        rec = synthesize(task_dir, mode=mode, seed=seed, per_class=per_class,
                         start_py=from_start_py, oracle=oracle, backend=backend, model=model,
                         max_refinements=max_refinements)
        if prompt:
            render_instruction(task_dir)
    except (SynthError, SchemaError, ReplayError, OracleRunError, TaskError, SandboxError,
            OSError) as e:
        raise _fail(str(e)) from None
    dropped = ", ".join(f"{k} {v}" for k, v in rec.dropped.items()) or "none"
    classes = len({c for c in rec.classes if c not in rec.invalid_classes}) if rec.classes else "?"
    console.print(f"{rec.cases} cases in {classes} classes written to "
                  f"{task_dir}/tests (seed {seed}, from {rec.source}); generated "
                  f"{rec.generated}, duplicates removed {rec.duplicates}, generation failures "
                  f"{rec.generation_skipped}, dropped: {dropped}")
    if rec.model is not None:
        cost = "n/a" if rec.model.cost_usd is None else f"${rec.model.cost_usd:.4f}"
        console.print(f"auxiliary model {rec.model.model}: {rec.model.rounds} rounds, "
                      f"{rec.model.calls} calls, {rec.model.usage.get('input') or 0} input / "
                      f"{rec.model.usage.get('output') or 0} output tokens, {cost} "
                      "(task construction)")
    for c in rec.invalid_classes:
        console.print(f"[yellow]class without a working positive case (dropped): {c}[/yellow]")
    if rec.schema_file and rec.draft_values:
        console.print(f"[yellow]placeholders to edit[/yellow] in {escape(rec.schema_file)} (the "
                      "value pools drafted from --help are generic: set each parameter's "
                      "\"values\" and the \"fixtures\" to what the tool takes, then rerun "
                      "`agentmeter difftest synth` without --from-help):")
        for line in rec.draft_values:
            console.print(f"  {escape(line)}")
    if prompt:
        console.print(f"instruction written to {task_dir}/instruction.md")


@difftest_app.command("new")
def new_task(
    name: Annotated[str, typer.Argument(help="the task's name (its directory)")],
    oracle_pypi: Annotated[str | None, typer.Option(
        "--oracle-pypi", help="the oracle is this PyPI requirement (installed at image build)")
        ] = None,
    oracle_apt: Annotated[str | None, typer.Option(
        "--oracle-apt", help="the oracle is this Debian package")] = None,
    oracle_dir: Annotated[Path | None, typer.Option(
        "--oracle-dir", help="the oracle is this Python project (copied into the task)")] = None,
    command: Annotated[str | None, typer.Option(
        "--command", help="the oracle's command (default: the package or directory name)")
        ] = None,
    into: Annotated[Path, typer.Option("--into", help="where the task directory is made")
                    ] = Path("."),
    tier: Annotated[str, typer.Option(help="easy | medium | hard")] = "easy",
    category: Annotated[str, typer.Option(help="the task's domain")] = "utility",
    fetch_solution: Annotated[bool, typer.Option(
        "--fetch-solution/--no-fetch-solution", help="PyPI: download the oracle's sdist into "
        "solution/ as the reference (pip download)")] = True,
) -> None:
    """Make a complete CLI-generation task for a new oracle: task.toml, the environment (the
    oracle installed out of the agent's reach, offline package sources), solution/solve.sh and
    a placeholder instruction; then run `difftest synth TASK --from-help --prompt`."""
    from agentmeter.synth.scaffold import ScaffoldError, default_command, scaffold

    given = [(s, v) for s, v in (("pypi", oracle_pypi), ("apt", oracle_apt),
                                 ("dir", None if oracle_dir is None else str(oracle_dir)))
             if v is not None]
    if len(given) != 1:
        raise _fail("give one of --oracle-pypi PKG, --oracle-apt PKG, --oracle-dir DIR")
    source, spec = given[0]
    try:
        task = scaffold(into, name, source, spec, command, tier, category)  # type: ignore[arg-type]
    except (ScaffoldError, OSError) as e:
        raise _fail(str(e)) from None
    console.print(f"task written to {task}")
    if source == "pypi" and fetch_solution:
        _fetch_reference(task, spec, command or default_command("pypi", spec))
    if source == "apt":
        console.print("[yellow]no reference solution[/yellow]: write one under "
                      "solution/ (see solution/solve.sh); `tasks check` reports the task broken "
                      "until then")
    console.print(f"next: agentmeter difftest synth {task} --from-help --prompt  (then edit "
                  "the placeholder values it lists in schema.json and rerun without "
                  "--from-help)")


def _fetch_reference(task: Path, spec: str, command: str) -> None:
    """The PyPI oracle's reference: its sdist in solution/, else (a release that ships only a
    pure-Python wheel) a source tree derived from the wheel."""
    import subprocess
    import sys
    import tempfile

    from rich.markup import escape

    from agentmeter.synth.scaffold import ScaffoldError, reference_from_wheel

    def download(into: Path, binary: str) -> str | None:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", binary,
                            ":all:", "-q", "-d", str(into), spec],
                           capture_output=True, text=True, check=False)
        return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1][:200]

    error = download(task / "solution", "--no-binary")
    if error is None:
        return
    with tempfile.TemporaryDirectory(prefix="agentmeter-wheel-") as tmp:
        werror = download(Path(tmp), "--only-binary")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if werror is None and wheels:
            try:
                ref = reference_from_wheel(wheels[0], task, command)
            except ScaffoldError as e:
                werror = str(e)
            else:
                console.print(f"no sdist ({escape(error)}): the reference is {ref}, "
                              f"derived from {wheels[0].name} (its modules, a pyproject.toml "
                              "from its metadata)")
                return
    console.print("[yellow]no reference could be downloaded[/yellow] (put the oracle's source "
                  f"archive in solution/): sdist: {escape(error)}; wheel: {escape(werror or '?')}")


def _fail(message: str) -> typer.Exit:
    """``fail`` with the message's brackets shown (``[difftest]`` is not console markup)."""
    from rich.markup import escape

    return fail(escape(message))


def register(app: typer.Typer) -> None:
    app.add_typer(difftest_app, name="difftest")


def candidate_task(task_dir: Path, candidate: Path, into: Path) -> Path:
    """A copy of the CLI-generation task ``task_dir`` whose reference solution is ``candidate``
    (a directory copied into the workspace), for an ad-hoc oracle-vs-candidate comparison."""
    import shutil

    from agentmeter.tasks.native import load_native_task

    task = load_native_task(task_dir)  # refuses a broken task with file and field named
    if task.difftest is None:
        raise ValueError(f"{task_dir}: not a CLI-generation task (no [difftest] section)")
    if not candidate.is_dir():
        raise ValueError(f"{candidate}: the candidate must be a directory (the tool's repository)")
    copy = into / task_dir.resolve().name
    shutil.copytree(task_dir, copy, ignore=shutil.ignore_patterns("solution"))
    shutil.copytree(candidate, copy / "solution" / "candidate", symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "node_modules", "__pycache__"))
    (copy / "solution" / "solve.sh").write_text(
        '#!/bin/bash\nset -e\ncp -r "$(dirname "$0")/candidate/." .\n')
    return copy


@difftest_app.command("run")
def run_adhoc(
    task_dir: Annotated[Path, typer.Argument(help="a CLI-generation task: its oracle, "
                                             "environment and frozen cases")],
    candidate: Annotated[Path, typer.Option("--candidate", help="the tool's repository to "
                                            "compare with the oracle")],
    judge_model: Annotated[str | None, typer.Option(
        "--judge-model", help="the SM judge (e.g. scripted/judge); none: no SM")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="the configuration name the candidate is stored under (default: "
        "its directory's name)")] = None,
    backend: Annotated[str, typer.Option(help="sandbox backend")] = "local",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare a candidate repository with TASK_DIR's oracle on its cases, once, and print the
    funnel per command class (the run is stored like any other: `agentmeter report RUN`), under
    the configuration ``candidate NAME``; a failed build is reported with its cause."""
    import tempfile

    from agentmeter.cli.run import execute_run
    from agentmeter.runner.session import RunRequest, RunSetupError, prepare
    from agentmeter.tasks.errors import TaskError

    label = candidate_label(candidate, name)
    with tempfile.TemporaryDirectory(prefix="agentmeter-difftest-") as tmp:
        try:
            suite = Path(tmp) / "suite"
            suite.mkdir()
            candidate_task(task_dir, candidate, suite)
            # the reference agent replays the candidate; the option makes each candidate its
            # own configuration (its id), the label names it
            prepared = prepare(RunRequest(suites=[str(suite)], agents=["oracle"],
                                          agent_options={"oracle": {"candidate": label}},
                                          backend=backend, judge_model=judge_model))
            prepared.configs = [relabel(c, label) for c in prepared.configs]
        except (TaskError, ValueError, OSError, RunSetupError) as e:
            raise _fail(str(e)) from None
        st, rid, _ = execute_run(prepared, store, None, as_json)
    (trial,) = st.latest_completed_trials(rid)
    _print_trial(trial, rid, as_json)


def candidate_label(candidate: Path, name: str | None) -> str:
    """``candidate NAME``: the given name, else the candidate directory's name."""
    return f"candidate {(name or candidate.resolve().name).strip() or 'unnamed'}"


def relabel(config: PlannedConfig, label: str) -> PlannedConfig:
    from agentmeter.runner.plan import PlannedConfig

    return PlannedConfig(config.record.model_copy(update={"label": label}), config.agent)


def _print_trial(trial: TrialRecord, run_id: str, as_json: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    classes: dict[str, str] = trial.extra.get("difftest_classes") or {}
    if as_json:
        print(json.dumps({"run_id": run_id, "trial_id": trial.id, "status": trial.status.value,
                          "reward": trial.reward, "rewards": trial.rewards, "error": trial.error,
                          "build_cause": trial.extra.get("build_cause"),
                          "classes": classes, "entry_point": trial.extra.get("entry_point"),
                          "evaluation": trial.extra.get("evaluation")}, indent=1))
        return
    r = trial.rewards
    table = Table(title=f"run {run_id}: build {'ok' if r.get('build') == 1.0 else 'FAILED'}, "
                  f"reward {trial.reward if trial.reward is not None else 'n/a'} "
                  f"({trial.extra.get('reward_metric', '?')})")
    levels = ("exec", "side_effects", "em", "fm", "sm")
    for col in ("class", "cases", *levels):
        table.add_column(col, justify="left" if col == "class" else "right")
    for key, template in sorted(classes.items()):
        cells = [r.get(f"{key}.{lv}") for lv in levels]
        table.add_row(template, f"{r.get(f'{key}.cases', 0):.0f}",
                      *("n/a" if v is None else f"{v:.0%}" for v in cells))
    console.print(table)
    cause = trial.extra.get("build_cause")
    if r.get("build") == 0.0:
        console.print(f"[red]the candidate did not build[/red]: "
                      f"{escape(str(cause or 'see install.log'))} (the whole log: the trial's "
                      "install.log artifact); every case counts 0 (Build = 0), none is a "
                      "framework error")
    if trial.error:
        console.print(f"[yellow]{escape(trial.error)}[/yellow]")
    ep = trial.extra.get("entry_point") or {}
    console.print(f"entry point: expected {ep.get('expected')!r}, found {ep.get('found')!r} "
                  f"({ep.get('rule')}), --help ok: {ep.get('help_ok')}")

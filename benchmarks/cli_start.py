"""CLI start-up benchmark: wall time of short ``agentmeter`` invocations, against the floor.

Each case is a fresh process (``python -m agentmeter.cli ...`` on this tree's src, and the
installed ``agentmeter`` entry point when there is one), run ``--runs`` times; the cases take turns
so that a load change hits them all alike. Floors in the same run: ``python -c pass`` (the
interpreter and site) and a bare typer app's ``--help`` (what typer and rich cost to print help).
``run_start`` is ``agentmeter run --suite starter --agent oracle`` up to the point where it
begins real work (the runner's entry points are stand-ins that end the process); ``run_setup`` is
``agentmeter run --pair x``: that plus the runner's import (the first thing the command does), up
to the first check of the request (refused there: nothing runs, nothing is written). Bytecode is
cached in a temporary directory (as for an installed copy) unless ``--no-bytecode-cache``.
``help_tty`` is ``--help`` printing to a terminal (a pty): the rich help, where the other cases
print to a pipe or file (plain help). ``--baseline DIR`` (another tree's src, e.g. made by
``git archive <commit> src | tar -x -C DIR``) runs every agentmeter case on that tree too, in the
same rounds (``before:<case>`` right after ``<case>``): an A/B in one run.
Prints a human summary, then a final JSON line (seconds; ``over_floor`` = median - floor median;
``cpu_median`` = user + system CPU of the process, less bound to the machine's load).
Usage: python benchmarks/cli_start.py [--runs 10] [--src DIR] [--baseline DIR] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

BARE_TYPER = """
import typer
app = typer.Typer(help="bare")
@app.command()
def a(x: int = 1) -> None:
    "a"
@app.command()
def b(x: int = 1) -> None:
    "b"
app()
"""


# ``agentmeter run`` up to its real work: the runner's entry points (imported first thing in the
# command's body) are stand-ins that end the process when the command reaches them
RUN_UNTIL_WORK = """
import os, sys, types
stub = types.ModuleType("agentmeter.runner.session")
class RunSetupError(Exception):
    pass
def begin(*args, **kwargs):
    os._exit(0)
stub.RunSetupError = RunSetupError
stub.__getattr__ = lambda name: begin  # make_request, prepare, ... (and RunRequest, imported early)
sys.modules["agentmeter.runner.session"] = stub
sys.argv = ["agentmeter", "run", "--suite", "starter", "--agent", "oracle"]
from agentmeter.cli import app
app()
"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


#: the cases that start no agentmeter (the same whichever tree)
FLOORS = ("python_pass", "typer_bare_help")


def cases() -> dict[str, list[str]]:
    py = sys.executable
    cli = [py, "-m", "agentmeter.cli"]
    out = {
        "python_pass": [py, "-c", "pass"],
        "typer_bare_help": [py, "-c", BARE_TYPER, "--help"],
        "help": [*cli, "--help"],
        "help_tty": [*cli, "--help"],  # on a terminal: typer's rich help
        "version": [*cli, "--version"],
        "run_help": [*cli, "run", "--help"],
        "run_start": [py, "-c", RUN_UNTIL_WORK],
        "run_setup": [*cli, "run", "--pair", "x"],
        "tasks_list_starter": [*cli, "tasks", "list", "starter"],
    }
    # the entry point next to this interpreter (not a version manager's shim), on this tree's src
    script = Path(py).parent / "agentmeter"
    found = str(script) if script.is_file() else shutil.which("agentmeter")
    if found:
        out["entry_point_help"] = [found, "--help"]
    return out


def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--src", type=Path, default=SRC,
                    help="the agentmeter source tree to start (default: this checkout's src)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a second source tree to start in the same rounds (cases 'before:...')")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module on every start (keeps PYTHONDONTWRITEBYTECODE)")
    args = ap.parse_args()
    pycache = tempfile.TemporaryDirectory()

    def env_for(src: Path) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(src), *filter(None, [os.environ.get("PYTHONPATH")])]), "COLUMNS": "100"}
        if not args.no_bytecode_cache:
            # as installed (bytecode compiled once), without writing into the tree
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = pycache.name
        return env

    env = env_for(args.src)
    before = env_for(args.baseline.resolve()) if args.baseline is not None else None
    todo: dict[str, tuple[list[str], dict[str, str]]] = {}
    for name, argv in cases().items():  # each case next to its baseline: they alternate
        todo[name] = (argv, env)
        if before is not None and name not in FLOORS:
            todo[f"before:{name}"] = (argv, before)
    times: dict[str, list[float]] = {name: [] for name in todo}
    cpu: dict[str, list[float]] = {name: [] for name in todo}  # user + system: less load-bound
    with tempfile.TemporaryDirectory() as cwd:
        for name, (argv, case_env) in todo.items():  # one untimed round: caches, exit codes
            r = subprocess.run(argv, cwd=cwd, env=case_env, capture_output=True)
            expected = 2 if name.endswith("run_setup") else 0
            if r.returncode != expected:
                raise SystemExit(f"{name}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
        for _ in range(args.runs):
            for name, (argv, case_env) in todo.items():
                tty = "_tty" in name
                out, term = pty.openpty() if tty else (subprocess.DEVNULL, subprocess.DEVNULL)
                t = time.perf_counter()
                proc = subprocess.Popen(argv, cwd=cwd, env=case_env, stdout=term,
                                        stderr=subprocess.DEVNULL)
                if tty:  # read what it prints, as a terminal would
                    os.close(term)
                    with contextlib.suppress(OSError):  # EIO: the program closed the terminal
                        while os.read(out, 65536):
                            pass
                    os.close(out)
                _, _, usage = os.wait4(proc.pid, 0)
                times[name].append(time.perf_counter() - t)
                cpu[name].append(usage.ru_utime + usage.ru_stime)
                proc.returncode = 0  # reaped above
    floor = statistics.median(times["python_pass"])
    cpu_floor = statistics.median(cpu["python_pass"])
    result: dict[str, object] = {"src": str(args.src), "runs": args.runs,
                                 "baseline": str(args.baseline) if args.baseline else None,
                                 "cpus": os.cpu_count(),
                                 "loadavg_1m": round(os.getloadavg()[0], 2),
                                 "bytecode_cached": not env.get("PYTHONDONTWRITEBYTECODE")}
    print(f"{'case':<28}{'median s':>10}{'p90 s':>10}{'over floor':>12}{'cpu s':>8}"
          f"{'cpu over':>10}")
    for name, xs in times.items():
        med, p90, c = statistics.median(xs), pct(xs, 90), statistics.median(cpu[name])
        result[name] = {"median": round(med, 3), "p90": round(p90, 3),
                        "over_floor": round(med - floor, 3), "cpu_median": round(c, 3),
                        "cpu_over_floor": round(c - cpu_floor, 3)}
        print(f"{name:<28}{med:>10.3f}{p90:>10.3f}{med - floor:>12.3f}{c:>8.3f}"
              f"{c - cpu_floor:>10.3f}")
    pycache.cleanup()
    return result


if __name__ == "__main__":
    print(json.dumps(main()))

"""The suite's cuts, A/B in one run: each cut test as it was at a base commit (A, a temporary copy
tests/test_zzab_<file>) and as it is now (B), run alternately ``--rounds`` times, one pytest
process each (``-n 0``). Wall seconds, and the CPU seconds of every process the run started when a
cgroup-v1 ``cpuacct`` hierarchy is writable (root): the sandboxes' CPU too, but not the Docker
containers' (dockerd's); else the CPU of the pytest process and the children it waited for.
Prints a human summary, then a final JSON line.
Usage: python benchmarks/suite_cuts.py [--base 44335a5] [--rounds 2] [--only runner,run_lock]
(a cut in BASE_OF compares with its own base commit instead of --base)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
#: name: (the test file, the node ids at the base commit (A), the node ids now (B))
CUTS: dict[str, tuple[str, list[str], list[str]]] = {
    "runner": ("test_runner.py",
               ["test_oracle_and_nop_on_starter_tasks",
                "test_starter_suite_oracle_nop_and_native_with_scripted_policies"],
               ["test_starter_suite_oracle_nop_and_native_with_scripted_policies"]),
    "difftest_engine": ("test_difftest_engine.py",
                        ["test_oracle_source_passes_and_empty_workspace_builds_nothing"],
                        ["test_oracle_source_passes_and_empty_workspace_builds_nothing"]),
    "run_lock": ("test_run_lock.py", [""], [""]),
    # 2026-11-29, later (base c10a0fd: BASE_OF)
    "difftest_cli": ("test_difftest_cli.py",
                     ["test_difftest_run_compares_a_repository_with_the_oracle"],
                     ["test_difftest_run_compares_a_repository_with_the_oracle"]),
    "synth_build": ("test_difftest_synth_build.py",
                    ["test_cli_without_oracle_is_seeded_atomic_and_reports_bad_schema",
                     "test_cli_replays_a_start_py", "test_from_help_drafts_the_schema_in_the_sandbox"],
                    ["test_cli_without_oracle_is_seeded_atomic_and_reports_bad_schema",
                     "test_cli_replays_a_start_py", "test_from_help_drafts_the_schema_in_the_sandbox"]),
    "store_shared": ("test_store_shared.py", [""], [""]),
    "agencybench_import": ("test_agencybench_import.py",
                           ["test_cli_imports_and_reports_counts",
                            "test_cli_malformed_file_is_one_line"],
                           ["test_cli_imports_and_reports_counts",
                            "test_cli_malformed_file_is_one_line"]),
    "run_lock_unbuildable": ("test_run_lock.py",
                             ["test_an_unbuildable_environment_is_refused_or_fails_the_run"],
                             ["test_an_unbuildable_environment_is_refused_or_fails_the_run"]),
}
#: a cut whose A side is another commit than --base
BASE_OF = {"difftest_cli": "c10a0fd", "synth_build": "c10a0fd", "store_shared": "c10a0fd",
           "agencybench_import": "c10a0fd", "run_lock_unbuildable": "c10a0fd"}


def _node_ids(path: str, names: list[str]) -> list[str]:
    return [f"{path}::{n}" if n else path for n in names]


def _cpu_group(label: str) -> Path | None:
    group = CPUACCT / f"agentmeter-bench-{label}-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def _run(label: str, ids: list[str]) -> dict[str, Any]:
    group = _cpu_group(label)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", *ids]
    start = time.monotonic()
    if group is not None:  # the child enters the group before it execs pytest
        cmd = ["sh", "-c", f'echo $$ > {group}/tasks && exec "$@"', "sh", *cmd]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if group is not None:
        time.sleep(1)  # stragglers of the run (sandboxes being reaped) still count
        cpu = int((group / "cpuacct.usage").read_text()) / 1e9
        for pid in (group / "tasks").read_text().split():
            with contextlib.suppress(OSError):
                (CPUACCT / "tasks").write_text(pid)
        group.rmdir()
        how = "cgroup"
    else:
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        how = "rusage"
    last = (r.stdout.strip().splitlines() or [""])[-1]
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cpu_from": how,
            "ok": r.returncode == 0, "pytest": last, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="44335a5", help="the commit before the cuts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated names of CUTS")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CUTS)
    copies: list[Path] = []
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for name in names:
            file, _, _ = CUTS[name]
            copy = ROOT / "tests" / f"test_zzab_{file.removeprefix('test_')}"
            base = BASE_OF.get(name, args.base)
            text = subprocess.run(["git", "show", f"{base}:tests/{file}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout
            copy.write_text(text)
            copies.append(copy)
        for rnd in range(args.rounds):
            for name in names:
                file, a_names, b_names = CUTS[name]
                copy = f"tests/test_zzab_{file.removeprefix('test_')}"
                for side, ids in (("A", _node_ids(copy, a_names)),
                                  ("B", _node_ids(f"tests/{file}", b_names))):
                    res = _run(f"{name}-{side}", ids)
                    results.setdefault(name, {}).setdefault(side, []).append(res)
                    print(f"round {rnd + 1} {name} {side}: {res}", flush=True)
    finally:
        for copy in copies:
            copy.unlink(missing_ok=True)
    summary: dict[str, Any] = {}
    for name, sides in results.items():
        med = {side: {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s")}
               for side, runs in sides.items()}
        summary[name] = {**{f"{side}_{k}": v for side, m in med.items() for k, v in m.items()},
                         "saved_wall_s": round(med["A"]["wall_s"] - med["B"]["wall_s"], 1),
                         "saved_cpu_s": round(med["A"]["cpu_s"] - med["B"]["cpu_s"], 1),
                         "all_ok": all(r["ok"] for runs in sides.values() for r in runs)}
        print(f"{name}: A {med['A']} B {med['B']}")
    print(json.dumps({"benchmark": "suite_cuts", "base": args.base, "rounds": args.rounds,
                      "base_of": {n: BASE_OF.get(n, args.base) for n in names},
                      "cuts": summary}))


if __name__ == "__main__":
    main()

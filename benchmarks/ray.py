"""Ray executor benchmark: scheduling overhead per trial (ray vs local) and trials per minute
with one vs two worker nodes at the same total concurrency.

Everything real: a PostgreSQL server and a Ray cluster on this machine (a head and worker
nodes as separate ``ray start`` processes, tests/ray_fixtures.py), the oracle on trivial tasks
in local sandboxes, each run an ``agentmeter run`` process into the same PostgreSQL store.

- Overhead per trial: one slot (local: ``-c 1``; ray: one worker node with one slot), runs of
  1 and of N trivial trials; the marginal cost of a trial is ``(wall(N) - wall(1)) / (N - 1)``
  (process start, imports, ``ray.init``, the job's first Ray worker and the pre-flight probe are
  per run and cancel out); ray minus local is what the executor adds per trial.
- Throughput: N trials on two slots, as one node with two slots, then as two nodes with one
  slot each; trials/min from the marginal time the same way.
- Steady state, one slot, from the stored tries of the run of N (their tries run one after the
  other): the median time from one try's start to the next's, split into the try's own time
  (started to finished) and the time between tries; no per-run cost enters it, so it scatters
  far less than the marginal wall time under load (``steady_added_ms``: ray minus local).
- CPU per added trial, the same marginal way (stable under load, unlike wall time): the driver
  (the ``agentmeter run`` process and its children: for the local executor that is everything,
  sandboxes included) and, for ray, the cluster's nodes (each ``ray start`` process tree: raylet,
  agents, Ray workers and the sandboxes they start); ray total minus local total is the CPU the
  executor adds per trial.
- ``--baseline-src DIR`` (another checkout's ``src``, e.g. ``git archive <commit> src | tar -x
  -C /tmp/base``): one more one-slot cluster whose nodes and driver run that code, alternated
  with the rest: before/after in one run.
The variants alternate, ``--repeats`` times (the clusters stay up side by side, idle when not
used), and each figure is the median over the repeats: this machine is shared and noisy.
``--one-slot`` skips the two-slot throughput variants (a shorter A/B).
Prints a human summary, then a final JSON line.
Usage: python benchmarks/ray.py [--trials 30] [--repeats 3] [--one-slot] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
SRC = Path(__file__).resolve().parent.parent / "src"
sys.path[:0] = [str(SRC), str(TESTS)]
# the source tree, for the runs and for the Ray nodes' workers (which inherit it from ray start)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
from pg_fixtures import postgres_server  # noqa: E402
from ray_fixtures import RayCluster, start_cluster  # noqa: E402
from taskgen import make_task  # noqa: E402

from agentmeter.records import TrialStatus  # noqa: E402
from agentmeter.store.db import Store  # noqa: E402

_counter = iter(range(10**6))


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, with the children each has reaped
    (utime + stime + cutime + cstime from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def agentmeter_run(suite: Path, runs: Path, url: str, *, n: int, slots: int,
                   cluster: RayCluster | None, src: Path = SRC
                   ) -> tuple[float, float, float, list[tuple[float, float]]]:
    """One ``agentmeter run`` of the first ``n`` tasks of ``suite`` (its code from ``src``):
    (wall seconds, the driver's CPU seconds, the cluster's nodes' CPU seconds, each try's
    (started, finished) in epoch seconds as stored, by start)."""
    rid = f"bench-{'ray' if cluster else 'local'}-{next(_counter)}"
    args = [sys.executable, "-m", "agentmeter.cli", "run", "-s", str(suite), "-a", "oracle",
            "--run-id", rid, "--store", str(runs), "-c", str(slots), "--json"]
    for i in range(n):
        args += ["-t", f"trivial-{i:03d}"]
    if cluster is not None:
        args += ["--executor", "ray", "--ray-address", cluster.address]
    path = [str(src), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                        if p and p != str(SRC)]]
    env = {**os.environ, "AGENTMETER_DATABASE_URL": url, "PYTHONPATH": os.pathsep.join(path)}
    nodes = [n.proc.pid for n in cluster.nodes] if cluster is not None else []
    c0, n0 = _children_cpu_s(), sum(_tree_cpu_s(p) for p in nodes)
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t
    driver, node = _children_cpu_s() - c0, sum(_tree_cpu_s(p) for p in nodes) - n0
    if r.returncode != 0:
        raise SystemExit(f"{rid} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with Store.open(url, runs_dir=runs) as st:
        done = st.latest_completed_trials(rid)
    assert len(done) == n and all(t.status is TrialStatus.PASSED for t in done), \
        [(t.id, t.status, t.error) for t in done]
    spans = sorted((t.started_at.timestamp(), t.finished_at.timestamp()) for t in done
                   if t.started_at is not None and t.finished_at is not None)
    return wall, driver, node, spans


#: one variant's figures: seconds per added trial, wall of 1, wall of N, CPU ms per added
#: trial of the driver and of the nodes; in the run of N (one slot: its tries one after the
#: other), the ms from one try's start to the next's (median), a try's own ms (started to
#: finished, median) and the ms between one try's end and the next's start (median)
Marginal = tuple[float, float, float, float, float, float, float, float]


def marginal(suite: Path, runs: Path, url: str, trials: int, slots: int,
             cluster: RayCluster | None, src: Path = SRC, name: str = "") -> Marginal:
    one = agentmeter_run(suite, runs, url, n=1, slots=slots, cluster=cluster, src=src)
    many = agentmeter_run(suite, runs, url, n=trials, slots=slots, cluster=cluster, src=src)
    k = trials - 1
    spans = many[3]
    cycle = statistics.median(b[0] - a[0] for a, b in itertools.pairwise(spans)) * 1000
    own = statistics.median(f - st for st, f in spans) * 1000
    gap = statistics.median(b[0] - a[1] for a, b in itertools.pairwise(spans)) * 1000
    out = ((many[0] - one[0]) / k, one[0], many[0], (many[1] - one[1]) / k * 1000,
           (many[2] - one[2]) / k * 1000, cycle, own, gap)
    print(f"{name or ('ray' if cluster else 'local')} slots={slots}: 1 trial {one[0]:.1f} s, "
          f"{trials} trials {many[0]:.1f} s, {out[0] * 1000:.0f} ms per added trial; CPU per "
          f"added trial: driver {out[3]:.0f} ms, nodes {out[4]:.0f} ms; start to start "
          f"{cycle:.0f} ms (the try {own:.0f} ms, between tries {gap:.0f} ms)",
          file=sys.stderr, flush=True)
    return out


def store_write_ms(url: str, runs: Path, rid: str, n: int = 300) -> dict[str, float]:
    """Median round trip of the two writes a trial makes most (its record, each served call),
    on one connection to the PostgreSQL server: re-saving stored rows (idempotent upserts)."""
    with Store.open(url, runs_dir=runs) as st:
        trial = st.trials(rid)[0]
        call = st.model_calls(rid)[0]
        out: dict[str, float] = {}
        for name, write in (("save_trial", lambda: st.save_trial(trial)),
                            ("add_model_call", lambda: st.add_model_calls(rid, [call], trial.try_number))):
            times = []
            for _ in range(n):
                t = time.perf_counter()
                write()
                times.append(time.perf_counter() - t)
            out[name] = round(sorted(times)[n // 2] * 1000, 2)
    return out


def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one-slot", action="store_true",
                    help="only the one-slot variants (no two-slot throughput)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another checkout's src: a one-slot cluster and driver running it")
    args = ap.parse_args()
    n = args.trials
    base: Path | None = args.baseline_src.resolve() if args.baseline_src else None
    assert base is None or (base / "agentmeter").is_dir(), f"{base}: no agentmeter package"
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as url, contextlib.ExitStack() as up:
        root = Path(tmp)
        suite, runs = root / "suite", root / "runs"
        for i in range(n):
            make_task(suite, f"trivial-{i:03d}", solve="echo done > /app/done")
        # warm: the base and the environment layer are built once (we measure trials)
        agentmeter_run(suite, runs, url, n=1, slots=1, cluster=None)
        calls = root / "calls"
        make_task(calls, "scripted")
        rid = "bench-calls"
        r = subprocess.run([sys.executable, "-m", "agentmeter.cli", "run", "-s", str(calls), "-a",
                            "native", "-m", "scripted/solver", "--run-id", rid, "--store", str(runs)],
                           capture_output=True, text=True, env={**os.environ, "AGENTMETER_DATABASE_URL": url})
        assert r.returncode == 0, r.stderr[-2000:]
        writes = store_write_ms(url, runs, rid)
        # idle clusters side by side; the runs alternate between them and the local executor,
        # repeated, so the machine's load (shared, noisy) hits every variant alike
        layouts = {"ray_1x1": (1,)} if args.one_slot else \
            {"ray_1x1": (1,), "ray_1x2": (2,), "ray_2x1": (1, 1)}
        clusters = {k: up.enter_context(start_cluster(worker_slots=v)) for k, v in layouts.items()}
        variants: dict[str, tuple[int, RayCluster | None, Path]] = {
            "local_c1": (1, None, SRC), "ray_1x1": (1, clusters["ray_1x1"], SRC)}
        if base is not None:
            variants["ray_1x1_baseline"] = (1, up.enter_context(start_cluster(
                worker_slots=(1,), worker_env={"PYTHONPATH": str(base)})), base)
        if not args.one_slot:
            variants |= {"local_c2": (2, None, SRC), "ray_1x2": (2, clusters["ray_1x2"], SRC),
                         "ray_2x1": (2, clusters["ray_2x1"], SRC)}
        seen: dict[str, list[Marginal]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, (slots, cluster, src) in variants.items():
                seen[name].append(marginal(suite, runs, url, n, slots, cluster, src, name))
    per_trial = {k: statistics.median(m[0] for m in v) for k, v in seen.items()}
    fixed = {k: statistics.median(m[1] for m in v) for k, v in seen.items()}
    cpu = {k: {"driver": round(statistics.median(m[3] for m in v), 1),
               "nodes": round(statistics.median(m[4] for m in v), 1),
               "total": round(statistics.median(m[3] + m[4] for m in v), 1)}
           for k, v in seen.items()}

    steady = {k: {"start_to_start": round(statistics.median(m[5] for m in v), 1),
                  "try": round(statistics.median(m[6] for m in v), 1),
                  "between_tries": round(statistics.median(m[7] for m in v), 1)}
              for k, v in seen.items() if variants[k][0] == 1}

    def added(ray: str, loc: str = "local_c1") -> tuple[float, list[float]]:
        return (round((per_trial[ray] - per_trial[loc]) * 1000, 1),
                [round((a[0] - b[0]) * 1000, 1) for a, b in zip(seen[ray], seen[loc], strict=True)])

    res: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": _ray_version(), "platform": platform.platform(),
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 1)},
        "trials": n, "repeats": args.repeats,
        "seconds_per_trial_one_slot": {k: round(per_trial[k], 3) for k in variants
                                       if variants[k][0] == 1},
        "added_per_trial_ms": added("ray_1x1")[0],
        "added_per_trial_ms_each_repeat": added("ray_1x1")[1],
        # one slot, inside the run of N (no per-run costs at all): ms, medians over repeats
        "steady_ms": steady,
        "steady_added_ms": round(steady["ray_1x1"]["start_to_start"]
                                 - steady["local_c1"]["start_to_start"], 1),
        "steady_added_ms_each_repeat": [round(a[5] - b[5], 1) for a, b in
                                        zip(seen["ray_1x1"], seen["local_c1"], strict=True)],
        "cpu_ms_per_added_trial": cpu,
        "added_cpu_ms_per_trial": round(cpu["ray_1x1"]["total"] - cpu["local_c1"]["total"], 1),
        "per_run_fixed_s": {k: round(fixed[k], 2) for k in variants if variants[k][0] == 1},
        "postgres_write_ms_p50": writes,
    }
    if base is not None:
        res["baseline"] = {
            "src": str(base), "added_per_trial_ms": added("ray_1x1_baseline")[0],
            "added_per_trial_ms_each_repeat": added("ray_1x1_baseline")[1],
            "added_cpu_ms_per_trial": round(cpu["ray_1x1_baseline"]["total"]
                                            - cpu["local_c1"]["total"], 1),
            # this code minus the baseline's, per repeat (the two ran back to back)
            "wall_ms_this_minus_baseline_each_repeat": [
                round((a[0] - b[0]) * 1000, 1)
                for a, b in zip(seen["ray_1x1"], seen["ray_1x1_baseline"], strict=True)],
            "steady_added_ms": round(steady["ray_1x1_baseline"]["start_to_start"]
                                     - steady["local_c1"]["start_to_start"], 1),
            "steady_ms_this_minus_baseline_each_repeat": [
                round(a[5] - b[5], 1)
                for a, b in zip(seen["ray_1x1"], seen["ray_1x1_baseline"], strict=True)],
            "cpu_ms_this_minus_baseline": round(cpu["ray_1x1"]["total"]
                                                - cpu["ray_1x1_baseline"]["total"], 1)}
    if not args.one_slot:
        res["trials_per_minute_two_slots"] = {k: round(60 / per_trial[k], 1)
                                              for k in ("local_c2", "ray_1x2", "ray_2x1")}
    res["targets_met"] = {"added_per_trial_le_50ms": res["added_per_trial_ms"] <= 50}  # type: ignore[operator]
    return res


def _ray_version() -> str:
    # not ``import ray``: this file is ray.py, first on sys.path when run as a script
    from importlib.metadata import version

    return version("ray")


if __name__ == "__main__":
    out = main()
    print(out, file=sys.stderr)
    print(json.dumps(out))

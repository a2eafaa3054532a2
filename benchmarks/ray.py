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
The variants alternate, ``--repeats`` times (three clusters stay up side by side, idle when not
used), and each figure is the median over the repeats: this machine is shared and noisy.
Prints a human summary, then a final JSON line.
Usage: python benchmarks/ray.py [--trials 30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
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


def agentmeter_run(suite: Path, runs: Path, url: str, *, n: int, slots: int,
                   cluster: RayCluster | None) -> float:
    """Wall seconds of one ``agentmeter run`` of the first ``n`` tasks of ``suite``."""
    rid = f"bench-{'ray' if cluster else 'local'}-{next(_counter)}"
    args = [sys.executable, "-m", "agentmeter.cli", "run", "-s", str(suite), "-a", "oracle",
            "--run-id", rid, "--store", str(runs), "-c", str(slots), "--json"]
    for i in range(n):
        args += ["-t", f"trivial-{i:03d}"]
    if cluster is not None:
        args += ["--executor", "ray", "--ray-address", cluster.address]
    env = {**os.environ, "AGENTMETER_DATABASE_URL": url}
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{rid} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with Store.open(url, runs_dir=runs) as st:
        done = st.latest_completed_trials(rid)
    assert len(done) == n and all(t.status is TrialStatus.PASSED for t in done), \
        [(t.id, t.status, t.error) for t in done]
    return wall


def marginal(suite: Path, runs: Path, url: str, trials: int, slots: int,
             cluster: RayCluster | None) -> tuple[float, float, float]:
    """(seconds per additional trial, wall of 1, wall of N)."""
    one = agentmeter_run(suite, runs, url, n=1, slots=slots, cluster=cluster)
    many = agentmeter_run(suite, runs, url, n=trials, slots=slots, cluster=cluster)
    out = ((many - one) / (trials - 1), one, many)
    print(f"{'ray' if cluster else 'local'} slots={slots}: 1 trial {one:.1f} s, {trials} trials "
          f"{many:.1f} s, {out[0] * 1000:.0f} ms per added trial", file=sys.stderr, flush=True)
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
    args = ap.parse_args()
    n = args.trials
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
        # three idle clusters side by side; the runs alternate between them and the local
        # executor, repeated, so the machine's load (shared, noisy) hits every variant alike
        clusters = {k: up.enter_context(start_cluster(worker_slots=v))
                    for k, v in (("ray_1x1", (1,)), ("ray_1x2", (2,)), ("ray_2x1", (1, 1)))}
        variants: dict[str, tuple[int, RayCluster | None]] = {
            "local_c1": (1, None), "ray_1x1": (1, clusters["ray_1x1"]),
            "local_c2": (2, None), "ray_1x2": (2, clusters["ray_1x2"]),
            "ray_2x1": (2, clusters["ray_2x1"])}
        seen: dict[str, list[tuple[float, float, float]]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, (slots, cluster) in variants.items():
                seen[name].append(marginal(suite, runs, url, n, slots, cluster))
    per_trial = {k: statistics.median(m[0] for m in v) for k, v in seen.items()}
    fixed = {k: statistics.median(m[1] for m in v) for k, v in seen.items()}
    res: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": _ray_version(), "platform": platform.platform(),
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 1)},
        "trials": n, "repeats": args.repeats,
        "seconds_per_trial_one_slot": {"local": round(per_trial["local_c1"], 3),
                                       "ray": round(per_trial["ray_1x1"], 3)},
        "added_per_trial_ms": round((per_trial["ray_1x1"] - per_trial["local_c1"]) * 1000, 1),
        "added_per_trial_ms_each_repeat": [round((ray[0] - loc[0]) * 1000, 1) for ray, loc in
                                           zip(seen["ray_1x1"], seen["local_c1"], strict=True)],
        "per_run_fixed_s": {"local": round(fixed["local_c1"], 2), "ray": round(fixed["ray_1x1"], 2)},
        "trials_per_minute_two_slots": {k: round(60 / per_trial[k], 1)
                                        for k in ("local_c2", "ray_1x2", "ray_2x1")},
        "postgres_write_ms_p50": writes,
    }
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

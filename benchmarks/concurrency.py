"""Concurrency on one machine: N trials at once of the native agent and of a real CLI.

For each agent and each N (default 8, 32, 64): one run of N attempts of ``log-level-counts``
with ``scripted/solver`` on the local backend at concurrency N (``RunRequest(attempts=N,
concurrency=N, max_infra_retries=0)``, the function behind ``agentmeter run -c N``), after a
one-trial warm-up run that builds (or finds cached) every layer. Reported per run:

- ``wall_s`` and ``trials_per_min``;
- ``statuses``: trials by final status (``infra_invalid`` included; no infra retries, so every
  infra failure shows), with the first few errors;
- the harness's own CPU seconds (``getrusage(RUSAGE_SELF)``, exact) and its reaped children's
  (``RUSAGE_CHILDREN``, exact for what it counts: with the root-run zygote, the keepers are
  reaped by the kernel under the fork server, which ignores SIGCHLD, so neither they nor the
  execs they reap (bwrap, the agent's commands, the verifier) are in it: it is the bridges
  and the harness's other direct children only), split by a sampler process (every 0.25 s,
  ``/proc``) into the harness's non-agent children (the zygote's fork server, keepers and
  the children they fork ahead; the socket bridges; nsenter before it becomes bwrap, pasta,
  the harness's helpers) and the agent side (bwrap and everything under it: the agent's
  commands, a CLI's Node/Rust processes, the verifier). The sampled split misses processes
  shorter than one sampling interval; the harness's Python children are labelled by role
  (``zygote``, ``bridge``) in the by-command figures;
- memory (PSS, from ``/proc/PID/smaps_rollup``, so pages shared between the many children are
  counted once) of the harness process, of its non-agent children and of the agent side: peak
  and average of the sampled sums, and per concurrent trial: the harness's share (harness
  process + non-agent children) minus the idle harness before the run, divided by N.

Usage: ``python benchmarks/concurrency.py [--n 8,32,64] [--agents native,codex]``. The sampler
runs as a separate process (``--sample PID``) so its own cost is not the harness's. The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the checkout's agentmeter, not an installed one

TASK = "log-level-counts"
MODEL = "scripted/solver"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


# --- the sampler (a separate process) ---------------------------------------------------------

def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, ppid, cpu seconds) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    return comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _label(pid: int, comm: str) -> str:
    """``comm``, but the harness's Python children by role: the zygote's processes (its fork
    server, the keepers and each keeper's child waiting to become an exec's bwrap: all run
    zygote_server.py) and the socket bridges (``python -I -S -c``)."""
    if not comm.startswith("python"):
        return comm
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    if any(a.endswith(b"zygote_server.py") for a in argv):
        return "zygote"
    if b"-c" in argv:
        return "bridge"
    return comm


def sample_forever(root: int, out: Path, interval: float) -> None:
    """Sample the process tree under ``root`` until SIGTERM, then write the summary to ``out``."""
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    me = os.getpid()  # a child of the harness too, but not part of it
    cpu_last: dict[int, tuple[str, float]] = {}  # pid -> (class, last cpu seen)
    cpu_first: dict[int, float] = {}
    alive_at_start: set[int] = set()
    comms: dict[int, str] = {}
    labels: dict[tuple[int, str], str] = {}  # (pid, comm) -> _label
    fds = 0  # the harness's open file descriptors, peak
    by_comm: Counter[str] = Counter()  # class:comm -> peak PSS kB (summed over its processes)
    series: dict[str, list[int]] = {"harness": [], "children": [], "agent": []}
    counts: list[tuple[int, int]] = []
    while not stop and os.path.exists(f"/proc/{root}"):  # the harness gone: stop too
        procs: dict[int, tuple[str, int, float]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                st = _stat(int(d))
                if st is not None:
                    procs[int(d)] = st
        kids: dict[int, list[int]] = {}
        for pid, (_, ppid, _) in procs.items():
            kids.setdefault(ppid, []).append(pid)
        cls: dict[int, str] = {}
        todo = [(c, "children") for c in kids.get(root, []) if c != me]
        while todo:
            pid, c = todo.pop()
            if procs[pid][0] == "bwrap":
                c = "agent"
            cls[pid] = c
            todo += [(k, c) for k in kids.get(pid, [])]
        mem = {"harness": _pss_kb(root), "children": 0, "agent": 0}
        with contextlib.suppress(OSError):
            fds = max(fds, len(os.listdir(f"/proc/{root}/fd")))
        tick: Counter[str] = Counter()
        for pid, c in cls.items():
            kb = _pss_kb(pid)
            mem[c] += kb
            key = (pid, procs[pid][0])
            if key not in labels:
                labels[key] = _label(*key)
            tick[f"{c}:{labels[key]}"] += kb
            cpu_first.setdefault(pid, procs[pid][2])
            cpu_last[pid] = (c, procs[pid][2])
            comms[pid] = labels[key]
        for k, kb in tick.items():
            by_comm[k] = max(by_comm[k], kb)
        if not series["harness"]:
            alive_at_start = set(cls)
        for k, v in mem.items():
            series[k].append(v)
        counts.append((sum(1 for c in cls.values() if c == "children"),
                       sum(1 for c in cls.values() if c == "agent")))
        time.sleep(interval)
    cpu = {"children": 0.0, "agent": 0.0}
    cpu_by_comm: dict[str, float] = {}
    for pid, (c, last) in cpu_last.items():  # processes alive at the first sample: their delta
        used = last - cpu_first[pid] if pid in alive_at_start else last
        cpu[c] += used
        k = f"{c}:{comms[pid]}"
        cpu_by_comm[k] = cpu_by_comm.get(k, 0.0) + used
    res = {
        "samples": len(series["harness"]),
        "pss_mb": {k: {"first": round(v[0] / 1024, 1) if v else None,
                       "peak": round(max(v, default=0) / 1024, 1),
                       "avg": round(sum(v) / max(1, len(v)) / 1024, 1)} for k, v in series.items()},
        "harness_share_peak_mb": round(max((h + c for h, c in zip(series["harness"],
                                                                    series["children"],
                                                                    strict=True)),
                                           default=0) / 1024, 1),
        "harness_share_avg_mb": round(sum(h + c for h, c in zip(series["harness"],
                                                                  series["children"],
                                                                  strict=True))
                                      / max(1, len(series["harness"])) / 1024, 1),
        "processes_peak": {"children": max((c for c, _ in counts), default=0),
                           "agent": max((a for _, a in counts), default=0)},
        "cpu_s_sampled": {k: round(v, 2) for k, v in cpu.items()},
        "harness_fds_peak": fds,
        "peak_pss_mb_by_command": {k: round(v / 1024, 1) for k, v in by_comm.most_common(8)},
        "cpu_s_by_command": {k: round(v, 2) for k, v in sorted(cpu_by_comm.items(),
                                                                  key=lambda kv: -kv[1])[:8]},
    }
    out.write_text(json.dumps(res))


# --- the benchmark ----------------------------------------------------------------------------

def _rusage() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


async def one_run(agent: str, n: int, root: Path, interval: float) -> dict[str, Any]:
    from agentmeter.runner.session import RunRequest, prepare, run
    from agentmeter.store.db import Store

    store = Store.open(root / f"{agent}-{n}")
    warm = RunRequest(suites=["starter"], task_ids=[TASK], agents=[agent], models=[MODEL],
                      attempts=1, concurrency=1, max_infra_retries=0)
    await run(store, prepare(warm))  # builds (or finds cached) every layer; imports; first use
    req = RunRequest(suites=["starter"], task_ids=[TASK], agents=[agent], models=[MODEL],
                     attempts=n, concurrency=n, max_infra_retries=0)
    prepared = prepare(req)
    out = root / f"sample-{agent}-{n}.json"
    sampler = subprocess.Popen([sys.executable, __file__, "--sample", str(os.getpid()),
                                "--out", str(out), "--interval", str(interval)])
    await asyncio.sleep(2 * interval)  # the idle harness's first sample
    cpu0 = _rusage()
    t0 = time.perf_counter()
    try:
        rid, _ = await run(store, prepared)
    finally:
        wall = time.perf_counter() - t0
        cpu1 = _rusage()
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(timeout=60)
    sampled: dict[str, Any] = json.loads(out.read_text())
    trials = store.trials(rid)
    statuses = Counter(t.status.value for t in trials)
    errors = Counter((t.error or "")[:200] for t in trials if t.status.value != "passed")
    first_harness = sampled["pss_mb"]["harness"]["first"] or 0.0
    durations = sorted((t.finished_at - t.started_at).total_seconds() for t in trials
                       if t.started_at and t.finished_at)
    harness_cpu, children_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return {
        "agent": agent, "n": n, "trials": len(trials),
        "wall_s": round(wall, 2), "trials_per_min": round(len(trials) / wall * 60, 1),
        "trial_s": {"p50": round(durations[len(durations) // 2], 2) if durations else None,
                    "max": round(durations[-1], 2) if durations else None},
        "statuses": dict(statuses), "infra_invalid": statuses.get("infra_invalid", 0),
        "errors": dict(errors.most_common(3)),
        "cpu_s": {"harness": round(harness_cpu, 2), "children_all": round(children_cpu, 2),
                  "harness_per_trial": round(harness_cpu / max(1, len(trials)), 3),
                  "sampled_split": sampled["cpu_s_sampled"],
                  "sampled_by_command": sampled["cpu_s_by_command"]},
        "memory_mb": sampled["pss_mb"],
        "processes_peak": sampled["processes_peak"],
        "harness_fds_peak": sampled["harness_fds_peak"],
        "peak_pss_mb_by_command": sampled["peak_pss_mb_by_command"],
        "harness_share_peak_mb": sampled["harness_share_peak_mb"],
        "harness_mb_per_concurrent_trial": {
            "peak": round((sampled["harness_share_peak_mb"] - first_harness) / n, 1),
            "avg": round((sampled["harness_share_avg_mb"] - first_harness) / n, 1)},
        "agent_mb_per_concurrent_trial_peak": round(sampled["pss_mb"]["agent"]["peak"] / n, 1),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="8,32,64", help="concurrent trials, comma-separated")
    ap.add_argument("--agents", default="native,codex")
    ap.add_argument("--interval", type=float, default=0.25, help="sampling interval, seconds")
    args = ap.parse_args()
    fd_soft, fd_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentmeter-conc-") as tmp:
        for agent in args.agents.split(","):
            for n in (int(x) for x in args.n.split(",")):
                row = await one_run(agent, n, Path(tmp), args.interval)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    mem_total = os.sysconf("SC_PHYS_PAGES") * PAGE / 2**30
    native64 = [r for r in rows if r["agent"] == "native" and r["n"] == 64]
    targets = {}
    if native64:
        r = native64[0]
        targets = {"native_64_no_infra_invalid": r["infra_invalid"] == 0,
                   "native_64_all_completed": r["trials"] == 64,
                   "harness_mb_per_trial_le_30":
                       r["harness_mb_per_concurrent_trial"]["peak"] <= 30}
    print(json.dumps({
        "benchmark": "concurrency", "task": TASK, "model": MODEL, "backend": "local",
        "machine": {"cpus": os.cpu_count(), "mem_gib": round(mem_total, 1),
                    "nofile": [fd_soft, fd_hard], "loadavg_at_start": [round(x, 1) for x in load],
                    "loadavg_at_end": [round(x, 1) for x in os.getloadavg()]},
        "runs": rows, "targets_met": targets}))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--sample":
        sp = argparse.ArgumentParser()
        sp.add_argument("--sample", type=int)
        sp.add_argument("--out", type=Path)
        sp.add_argument("--interval", type=float, default=0.25)
        a = sp.parse_args()
        sample_forever(a.sample, a.out, a.interval)
    else:
        asyncio.run(main())

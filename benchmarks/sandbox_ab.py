"""Local sandbox lifecycle of two source trees, taking turns in one run: ``--base DIR`` is a
tree holding an older ``src`` (e.g. ``git archive COMMIT src | tar -x -C DIR``), compared with
this checkout's. Each tree runs in a worker process of its own; the driver asks them in turn for
one lifecycle (start + exec ``true`` + stop) at a time, so the machine's load falls on both
alike. Cases: a default spec and one with a trial's default limits; this tree also with spares
(``LocalBackend(spares=2)``); and ``execs10``: a default sandbox with ten execs of ``true``
back to back (``exec_true``: their p50; the lifecycle: start, the ten, stop). Each lifecycle
also by step (start, exec ``true``, stop), and its
CPU time: each worker runs in a cpuacct cgroup of its own, which holds everything it starts
(fork server, keepers, execs), so the CPU a lifecycle costs is read there, whatever else the
machine runs (``cpu_ms``; cgroup v1 cpuacct or v2 cpu.stat; absent where neither can be made).
Prints a table, then a final JSON line.
Usage: python benchmarks/sandbox_ab.py --base DIR [--n 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKER = r"""
import asyncio, sys, time
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import (DEFAULT_DISK_MB, DEFAULT_MEMORY_MB, DEFAULT_PIDS, Limits,
                                     SandboxSpec)
SPECS = {"default": SandboxSpec(), "limits": SandboxSpec(limits=Limits(
    memory_mb=DEFAULT_MEMORY_MB, pids=DEFAULT_PIDS, disk_mb=DEFAULT_DISK_MB))}
def cpu_ns():
    if not CG:
        return 0
    with open(CG) as f:
        text = f.read()
    if CG.endswith("cpu.stat"):
        return int(text.split("usage_usec", 1)[1].split()[0]) * 1000
    return int(text)
CG = sys.argv[2]
async def main():
    spares = int(sys.argv[1])
    b = LocalBackend(spares=spares) if spares else LocalBackend()
    for spec in SPECS.values():
        await b.prepare(spec)
    print("ok", flush=True)
    for line in sys.stdin:
        case = line.strip()
        execs = 10 if case == "execs10" else 1  # ten back to back: exec_true is their p50
        spec = SPECS["default" if execs > 1 else case]
        c = cpu_ns()
        t = time.perf_counter()
        sb = await b.start(spec)
        t1 = time.perf_counter()
        each = []
        for _ in range(execs):
            e = time.perf_counter()
            r = await sb.exec(["true"])
            each.append(time.perf_counter() - e)
            assert r.exit_code == 0, r
        t2 = t1 + sorted(each)[len(each) // 2]
        await sb.stop()
        t3 = time.perf_counter()
        c3 = cpu_ns()
        assert r.exit_code == 0, r
        stopped = t3 - (t1 + sum(each))
        print(t3 - t, t1 - t, t2 - t1, stopped, (c3 - c) / 1e9, flush=True)
    if spares:
        await b.close()
asyncio.run(main())
"""


def cpu_group(name: str) -> tuple[Path | None, str]:
    """A cgroup for one worker (the directory, the file its CPU time is read from); none where
    it cannot be made (not root, no cpuacct)."""
    for top, usage in ((Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"),
                       (Path("/sys/fs/cgroup"), "cpu.stat")):
        if (top / usage).exists() or (top / "cgroup.controllers").exists():
            d = top / f"agentmeter-ab-{os.getpid()}-{name}"
            try:
                d.mkdir()
            except OSError:
                continue
            if (d / usage).exists():
                return d, str(d / usage)
            d.rmdir()
    return None, ""


def worker(src: Path, spares: int, group: tuple[Path | None, str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    d = group[0]

    def join() -> None:  # in the child, before it runs anything
        if d is not None:
            (d / "cgroup.procs").write_text(str(os.getpid()))
    p = subprocess.Popen([sys.executable, "-c", WORKER, str(spares), group[1]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                         preexec_fn=join)
    assert p.stdout is not None and p.stdout.readline().strip() == "ok"
    return p


def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent / "src"
    groups = {name: cpu_group(name) for name in ("before", "after", "after_spares")}
    workers = {"before": worker(args.base / "src", 0, groups["before"]),
               "after": worker(here, 0, groups["after"]),
               "after_spares": worker(here, 2, groups["after_spares"])}
    times: dict[str, list[float]] = {}
    for _ in range(args.n):
        for spec in ("default", "limits", "execs10"):
            for name, p in workers.items():
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(spec + "\n")
                p.stdin.flush()
                total, start, exec_true, stop, cpu = map(float, p.stdout.readline().split())
                times.setdefault(f"{name}/{spec}", []).append(total)
                for step, x in (("start", start), ("exec_true", exec_true), ("stop", stop),
                                ("cpu", cpu)):
                    times.setdefault(f"{name}/{spec}/{step}", []).append(x)
    for p in workers.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait(60)
    for d, _ in groups.values():
        if d is not None:
            for _ in range(50):  # its keepers' last exits
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    res: dict[str, object] = {k: {"p50_ms": round(statistics.median(v[2:]) * 1000, 2),
                                  "n": len(v) - 2} for k, v in times.items()}  # 2 warm-ups
    for spec in ("default", "limits", "default/exec_true", "limits/exec_true", "default/start",
                 "limits/start", "default/stop", "limits/stop", "default/cpu", "limits/cpu",
                 "execs10", "execs10/exec_true", "execs10/cpu"):
        b = res[f"before/{spec}"]["p50_ms"] or 1e-9  # type: ignore[index]
        res[f"after_over_before/{spec}"] = round(res[f"after/{spec}"]["p50_ms"] / b, 3)  # type: ignore[index]
        res[f"spares_over_before/{spec}"] = round(
            res[f"after_spares/{spec}"]["p50_ms"] / b, 3)  # type: ignore[index]
    res["load_average"] = os.getloadavg()
    return res


if __name__ == "__main__":
    out = main()
    for k, v in out.items():
        print(f"{k}: {v}", file=sys.stderr)
    print(json.dumps(out))

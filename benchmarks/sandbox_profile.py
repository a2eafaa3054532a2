"""Where a local sandbox lifecycle's milliseconds go (start + exec ``true`` + stop).

Wraps the backend's steps with timers (no change to what they do) and runs N lifecycles of a
default spec and of one with a trial's default limits (memory, pids, disk: a cgroup and a tmpfs);
then times the pieces of one exec's process chain alone on the same machine, taking turns, so
that shares are comparable within this one run. Prints a table, then a final JSON line.
Usage: python benchmarks/sandbox_profile.py [--n 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from agentmeter.sandbox import cgroups, idmap, local, local_dirs, local_exec, local_keeper, seccomp, zygote
from agentmeter.sandbox.local import LocalBackend, LocalSandbox
from agentmeter.sandbox.spec import DEFAULT_DISK_MB, DEFAULT_MEMORY_MB, DEFAULT_PIDS, Limits, SandboxSpec

TIMES: dict[str, list[float]] = defaultdict(list)
_CUR: dict[str, float] = {}


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    """Time a step; one on another thread than the lifecycle's (the directory's removal after
    stop) is counted apart, never as part of the lifecycle's own steps."""
    if threading.current_thread().name.startswith("agentmeter-rm"):  # local_dirs.discard's
        name += " (background thread)"
    t = time.perf_counter()
    try:
        yield
    finally:
        _CUR[name] = _CUR.get(name, 0.0) + time.perf_counter() - t


def wrap(obj: Any, attr: str, name: str) -> None:
    fn = getattr(obj, attr, None)
    if fn is None:  # an older tree (before/after comparisons) without this step
        return
    if asyncio.iscoroutinefunction(fn):
        async def aw(*a: Any, **k: Any) -> Any:
            with timed(name):
                return await fn(*a, **k)
        setattr(obj, attr, aw)
    else:
        def w(*a: Any, **k: Any) -> Any:
            with timed(name):
                return fn(*a, **k)
        setattr(obj, attr, w)


def instrument(backend: LocalBackend) -> None:
    wrap(backend.layers, "resolve", "start: layers.resolve (cache hit)")
    wrap(local, "start_network", "start: start_network")
    wrap(cgroups, "create", "start: cgroup create")
    wrap(local_keeper.subprocess, "Popen", "start: keeper spawn (Popen)")
    wrap(idmap, "write_id_map", "start: id map write")
    wrap(seccomp, "program_fd", "exec: seccomp program fd")
    wrap(LocalSandbox, "_command", "exec: build bwrap argv")
    wrap(local_exec.asyncio, "create_subprocess_exec", "exec: spawn (create_subprocess_exec)")
    wrap(local_exec, "collect_output", "exec: run chain to exit (collect_output)")
    wrap(cgroups.Cgroup, "remove_soon", "stop: cgroup kill + remove (dirs in background)")
    wrap(local_dirs, "discard", "stop: sandbox dir renamed away (removed in background)")
    wrap(cgroups.Cgroup, "remove", "stop: cgroup remove")  # before: both on the path
    wrap(local_dirs, "rmtree", "stop: rmtree sandbox dir")
    wrap(zygote.Keeper, "end", "stop: keeper ends (execs reaped)")
    wrap(zygote.Keeper, "wait", "stop: keeper exit (namespaces torn down)")
    orig_readline_start = LocalSandbox._start_keeper

    def sk(self: LocalSandbox) -> None:
        with timed("start: _start_keeper total"):
            orig_readline_start(self)
    LocalSandbox._start_keeper = sk  # type: ignore[method-assign]


async def lifecycles(backend: LocalBackend, spec: SandboxSpec, n: int, tag: str) -> list[float]:
    await backend.prepare(spec)
    out = []
    for _ in range(n):
        _CUR.clear()
        t = time.perf_counter()
        with timed("start total"):
            sb = await backend.start(spec)
        with timed("exec true total"):
            r = await sb.exec(["true"])
        with timed("stop total"):
            await sb.stop()
        out.append(time.perf_counter() - t)
        assert r.exit_code == 0
        for k, v in _CUR.items():
            TIMES[f"{tag}|{k}"].append(v)
        TIMES[f"{tag}|lifecycle"].append(out[-1])
    return out


def chain_pieces(n: int) -> dict[str, float]:
    """p50 ms of pieces of an exec's process chain, run alone, taking turns."""
    busybox_true = ["true"]
    cases: dict[str, list[str]] = {
        "true": busybox_true,
        "keyctl session - true": ["keyctl", "session", "-", "true"],
        "sh -c 'exec true'": ["sh", "-c", 'exec "$@"', "sh", "true"],
        "unshare --user --map-root-user true": ["unshare", "--user", "--map-root-user", "true"],
        "unshare --mount --net true": ["unshare", "--mount", "--net", "true"],
        "bwrap --bind / / (pid,ipc,uts) true": ["bwrap", "--bind", "/", "/", "--dev", "/dev",
                                                "--proc", "/proc", "--unshare-ipc",
                                                "--unshare-pid", "--unshare-uts", "true"],
        "setpriv --reuid 1000 true": ["setpriv", "--reuid=1000", "--regid=1000",
                                      "--clear-groups", "true"],
        "ip link set lo up (in unshare --net)": ["unshare", "--net", "ip", "link", "set", "lo", "up"],
    }
    res: dict[str, list[float]] = defaultdict(list)
    for _ in range(n):
        for name, argv in cases.items():
            t = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            res[name].append(time.perf_counter() - t)
    return {k: round(statistics.median(v) * 1000, 2) for k, v in res.items()}


async def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    args = ap.parse_args()
    backend = LocalBackend()
    instrument(backend)
    limited = SandboxSpec(limits=Limits(memory_mb=DEFAULT_MEMORY_MB, pids=DEFAULT_PIDS,
                                        disk_mb=DEFAULT_DISK_MB))
    await lifecycles(backend, SandboxSpec(), 3, "warm")
    for _ in range(2):  # taking turns
        await lifecycles(backend, SandboxSpec(), args.n // 2, "default")
        await lifecycles(backend, limited, args.n // 2, "limits")
    t = time.perf_counter()
    for _ in range(200):
        seccomp.build_program()
    compile_ms = (time.perf_counter() - t) / 200 * 1000
    out: dict[str, object] = {"seccomp_build_program_ms": round(compile_ms, 3)}
    for tag in ("default", "limits"):
        out[tag] = {k.split("|", 1)[1]: round(statistics.median(v) * 1000, 2)
                    for k, v in sorted(TIMES.items()) if k.startswith(tag + "|")}
    out["chain_pieces_p50_ms"] = chain_pieces(max(10, args.n // 2))
    return out


if __name__ == "__main__":
    res = asyncio.run(main())
    for k, v in res.items():
        if isinstance(v, dict):
            print(k, file=sys.stderr)
            for kk, vv in v.items():
                print(f"  {kk:50s} {vv}", file=sys.stderr)
        else:
            print(f"{k}: {v}", file=sys.stderr)
    print(json.dumps(res))

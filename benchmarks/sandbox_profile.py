"""Where a local sandbox lifecycle's milliseconds go (start + exec ``true`` + stop).

Wraps the backend's steps with timers (no change to what they do) and runs N lifecycles of a
default spec and of one with a trial's default limits (memory, pids, disk: a cgroup and a tmpfs);
then times the pieces of one exec's process chain alone on the same machine, taking turns, so
that shares are comparable within this one run.

Then a hop-by-hop *timeline* of default lifecycles (``--timeline-n``): the fork server is
started from a wrapper script (made here, in a temporary directory) that loads the real
``zygote_server.py`` and its sibling modules and wraps their steps with marks; every process
(harness, fork server, keeper, the id map's child, the exec's child until its ``execve`` of
bwrap) appends ``CLOCK_MONOTONIC`` timestamps, its own CPU time and minor faults to one file.
The keeper's reap adds the CPU of the exec's processes (bwrap and the command, from
``getrusage(RUSAGE_CHILDREN)``). Printed: the p50 of each hop on the start's, the exec's and
the stop's path, CPU and minor faults per process, and the fork server's and a keeper's RSS at
a fork. A second set runs ``date +%s%N`` instead of ``true``, which splits bwrap's own time
into until the command runs and after. ``AGENTMETER_KEEP_TIMELINE=1`` keeps the raw marks.
Prints tables, then a final JSON line.
Usage: python benchmarks/sandbox_profile.py [--n 30] [--timeline-n 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
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
    wrap(zygote, "start_keeper_async", "start: zygote keeper start, awaited")
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


# -- timeline -------------------------------------------------------------------------------

#: the fork server's wrapper: the real zygote_server.py, its steps marked (see module docstring)
_WRAPPER = r'''
import importlib.util, os, resource, sys, time
TRACE = os.open(%(trace)r, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
_spec = importlib.util.spec_from_file_location("zygote_server", %(real)r)
zs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zs)
calls, wire, children, keeper, server = (zs.load(f"zygote_{m}") for m in (
    "calls", "wire", "children", "keeper", "forkserver"))

def mark(name, extra=""):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    try:
        os.write(TRACE, f"{time.monotonic_ns()}\t{os.getpid()}\t{name}\t"
                        f"{int((ru.ru_utime + ru.ru_stime) * 1e6)}\t{ru.ru_minflt}\t{extra}\n".encode())
    except OSError:
        pass

def around(obj, attr, name):
    fn = getattr(obj, attr)
    def w(*a, **k):
        mark(name + " <")
        try:
            return fn(*a, **k)
        finally:
            mark(name + " >")
    static = isinstance(getattr(obj, "__dict__", {}).get(attr), staticmethod)
    setattr(obj, attr, staticmethod(w) if static else w)

def rss():
    with open("/proc/self/status") as f:
        return next(l.split()[1] for l in f if l.startswith("VmRSS"))

_fork, _execve, _recv = os.fork, os.execve, wire.recv_request
def fork():
    mark("fork <")
    pid = _fork()
    mark("fork: child runs" if pid == 0 else "fork >", "" if pid == 0 else f"{pid} {rss()}")
    return pid
def execve(*a):
    mark("execve bwrap")
    _execve(*a)
def recv(sock):
    got = _recv(sock)
    mark("request received")
    return got
os.fork, os.execve, wire.recv_request = fork, execve, recv
for mod, attr, name in ((calls, "namespaces", "namespaces"), (calls, "make_dev", "make /dev"),
                        (calls, "make_paths", "make paths"), (wire, "send", "send"),
                        (server, "keeper_main", "keeper main")):
    around(mod, attr, name)
for attr, name in (("setup", "keeper setup"), ("_make_userns", "userns+idmap+dev"),
                   ("_prefork", "prefork exec child"), ("_enter", "exec child enters"),
                   ("_handle", "keeper handles request"), ("_end", "keeper end")):
    around(keeper.Keeper, attr, name)
_run = children.run_exec
def run(req, fds):
    mark("exec child runs bwrap")  # its descriptors closed next, this file's with them
    return _run(req, fds)
children.run_exec = keeper.run_exec = run
_reap = keeper.Keeper._reap
def reap(self, pidfd, sel):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    mark("reap exec <")
    _reap(self, pidfd, sel)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    mark("reap exec >", int((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e6))
keeper.Keeper._reap = reap
mark("server starts", rss())
server.main()
'''

_TRACE_FD = -1


def hmark(name: str) -> None:
    """A mark of the harness process (same file and format as the wrapper's); none outside a
    timeline."""
    import resource
    if _TRACE_FD < 0:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    os.write(_TRACE_FD, f"{time.monotonic_ns()}\t{os.getpid()}\tH:{name}\t"
                        f"{int((ru.ru_utime + ru.ru_stime) * 1e6)}\t{ru.ru_minflt}\t\n".encode())


def hwrap(obj: Any, attr: str, name: str) -> None:
    fn = getattr(obj, attr, None)
    if fn is None:  # an older tree without this step
        return
    if asyncio.iscoroutinefunction(fn):
        async def aw(*a: Any, **k: Any) -> Any:
            hmark(name + " <")
            try:
                return await fn(*a, **k)
            finally:
                hmark(name + " >")
        setattr(obj, attr, aw)
    else:
        def w(*a: Any, **k: Any) -> Any:
            hmark(name + " <")
            try:
                return fn(*a, **k)
            finally:
                hmark(name + " >")
        setattr(obj, attr, w)


_MARKED = False


def _harness_marks() -> None:
    global _MARKED
    if _MARKED:
        return
    _MARKED = True
    hwrap(zygote, "start_keeper", "start_keeper (on its thread)")
    hwrap(zygote, "start_keeper_async", "start_keeper_async")
    hwrap(LocalSandbox, "_start_keeper", "_start_keeper (thread)")
    hwrap(zygote.Keeper, "spawn", "spawn (pipes, request sent)")
    hwrap(local_exec, "collect_output", "collect_output")
    hwrap(zygote.Keeper, "end", "keeper.end")
    orig_readable = zygote.Keeper._readable

    def readable(self: zygote.Keeper) -> None:
        hmark("keeper's message read")
        orig_readable(self)
    zygote.Keeper._readable = readable  # type: ignore[method-assign]


async def timeline(n: int, command: list[str]) -> dict[str, Any]:
    """``n`` default lifecycles (after 3 unmarked) with the fork server run from the marking
    wrapper: the p50 of each hop on the start's, the exec's and the stop's path (``CHAINS``),
    and CPU and minor faults per process."""
    global _TRACE_FD
    tmp = tempfile.mkdtemp(prefix="agentmeter-timeline-")
    trace = os.path.join(tmp, "trace")
    open(trace, "w").close()
    wrapper = os.path.join(tmp, "zygote_server.py")
    with open(wrapper, "w") as f:
        f.write(_WRAPPER % {"trace": trace, "real": str(zygote.SERVER)})
    _TRACE_FD = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    saved = zygote.SERVER, zygote._server
    zygote.SERVER, zygote._server = Path(wrapper), None  # a new server
    backend = LocalBackend()
    spec = SandboxSpec()
    await backend.prepare(spec)
    _harness_marks()
    outputs: list[tuple[int, str]] = []
    for i in range(n + 3):
        hmark(f"lifecycle {i} <")
        hmark("backend.start <")
        sb = await backend.start(spec)
        hmark("backend.start >")
        hmark("exec <")
        r = await sb.exec(command)
        hmark("exec >")
        hmark("stop <")
        await sb.stop()
        hmark("stop >")
        hmark(f"lifecycle {i} >")
        assert r.exit_code == 0, r
        outputs.append((i, r.stdout.strip()))
    await backend.close()
    # the wrapped server and its keepers end with their socket; the real one serves from here
    proc, sock = zygote._server if zygote._server else (None, None)
    zygote.SERVER, zygote._server = saved
    if sock is not None and proc is not None:
        sock.close()
        proc.wait(10)
    os.close(_TRACE_FD)
    _TRACE_FD = -1
    with open(trace) as f:
        rows = [line.split("\t", 5) for line in f.read().splitlines()]
    if os.environ.get("AGENTMETER_KEEP_TIMELINE"):  # the raw marks, for a closer look
        print(f"timeline marks kept in {trace}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    events = sorted((int(t), int(pid), name, int(cpu), int(flt), extra.strip())
                    for t, pid, name, cpu, flt, extra in rows)
    return _analyse(events, n, outputs, command)


Event = tuple[int, int, str, int, int, str]  # ns, pid, mark, CPU µs, minor faults, extra

#: the hops of a lifecycle's critical path, (role, mark) in order; a mark a tree lacks is
#: skipped. Only marks made before the next hop can start (a sender's mark before it sends).
CHAINS: dict[str, list[tuple[str, str]]] = {
    "start": [("harness", "H:backend.start <"), ("harness", "H:start_keeper_async <"),
              ("harness", "H:start_keeper (on its thread) <"),
              ("fork server", "request received"), ("keeper", "request received"),
              ("keeper", "keeper setup <"), ("keeper", "userns+idmap+dev <"),
              ("id map child", "make /dev <"), ("id map child", "make /dev >"),
              ("id map child", "make paths >"), ("keeper", "userns+idmap+dev >"),
              ("keeper", "send <"), ("harness", "H:start_keeper_async >"),
              ("harness", "H:start_keeper (on its thread) >"), ("harness", "H:backend.start >")],
    "exec": [("harness", "H:exec <"), ("harness", "H:spawn (pipes, request sent) <"),
             ("keeper", "request received"), ("keeper", "keeper handles request <"),
             ("exec child", "request received"), ("exec child", "exec child runs bwrap"),
             ("command", "command runs"), ("keeper", "reap exec <"), ("keeper", "send <"),
             ("harness", "H:keeper's message read"), ("harness", "H:collect_output >"),
             ("harness", "H:exec >")],
    "stop": [("harness", "H:stop <"), ("harness", "H:keeper.end <"),
             ("keeper", "request received"), ("keeper", "keeper end <"), ("keeper", "send <"),
             ("harness", "H:keeper.end >"), ("harness", "H:stop >")],
}


def _roles(events: list[Event], harness_pid: int, server_pid: int, t0: int,
           t1: int) -> dict[int, str]:
    """Each process's role in the lifecycle between ``t0`` and ``t1``, by the marks it made."""
    said: dict[int, set[str]] = defaultdict(set)
    setup_at: dict[int, int] = {}
    for t, pid, name, *_ in events:
        said[pid].add(name)
        if name == "keeper setup <":
            setup_at[pid] = t
    roles = {harness_pid: "harness", server_pid: "fork server", -1: "command"}
    for pid, names in said.items():
        if pid in roles:
            continue
        if pid in setup_at:
            roles[pid] = ("keeper" if t0 <= setup_at[pid] <= t1 else
                          "next keeper (forked ahead)" if setup_at[pid] > t1 else "last keeper")
        elif "namespaces <" in names:
            roles[pid] = "keeper forked ahead (unused)"
        elif "make /dev <" in names:
            roles[pid] = "id map child"
        elif "exec child runs bwrap" in names:
            roles[pid] = "exec child"
        elif "exec child enters <" in names:
            roles[pid] = "exec child forked ahead (unused, killed at stop)"
        else:
            roles[pid] = "other"
    return roles


def _chain(win: list[Event], roles: dict[int, str], steps: list[tuple[str, str]]
           ) -> list[tuple[str, int]]:
    """The first event of each step, in order (a step not found is skipped)."""
    out: list[tuple[str, int]] = []
    pos = 0
    for role, name in steps:
        for j in range(pos, len(win)):
            t, pid, mark, *_ = win[j]
            if mark == name and roles.get(pid) == role:
                out.append((f"{role}: {name}", t))
                pos = j + 1
                break
    return out


def _analyse(events: list[Event], n: int, outputs: list[tuple[int, str]],
             command: list[str]) -> dict[str, Any]:
    starts = {name: t for t, _, name, *_ in events
              if name.startswith("H:lifecycle ") and name.endswith("<")}
    ends = {name: t for t, _, name, *_ in events
            if name.startswith("H:lifecycle ") and name.endswith(">")}
    server_pid = next(pid for _, pid, name, *_ in events if name == "server starts")
    harness_pid = next(pid for _, pid, name, *_ in events if name.startswith("H:"))
    hops: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in CHAINS}
    order: dict[str, list[str]] = {k: [] for k in CHAINS}
    cpu: dict[str, list[float]] = defaultdict(list)
    faults: dict[str, list[float]] = defaultdict(list)
    delta = time.time_ns() - time.monotonic_ns()  # CLOCK_REALTIME - CLOCK_MONOTONIC
    for i in range(3, n + 3):
        t0, t1 = starts[f"H:lifecycle {i} <"], ends[f"H:lifecycle {i} >"]
        win = [e for e in events if t0 <= e[0] <= t1]
        if command[0] == "date":  # the command's own clock (realtime), mapped onto monotonic
            with contextlib.suppress(ValueError):
                win = sorted([*win, (int(dict(outputs)[i]) - delta, -1, "command runs", 0, 0, "")])
        roles = _roles(events, harness_pid, server_pid, t0, t1)
        for part, steps in CHAINS.items():
            got = _chain(win, roles, steps)
            for (_, ta), (b, tb) in zip(got, got[1:], strict=False):
                hops[part][b].append((tb - ta) / 1e6)
                if b not in order[part]:
                    order[part].append(b)
        first: dict[int, tuple[int, int]] = {}
        last: dict[int, tuple[int, int]] = {}
        for _, pid, name, c, flt, extra in win:
            first.setdefault(pid, (c, flt))
            last[pid] = (c, flt)
            if name == "reap exec >" and extra and roles.get(pid) == "keeper":
                cpu["bwrap + command (+ the exec child before its execve)"].append(int(extra) / 1e3)
        for pid, (c1, f1) in last.items():
            role = roles.get(pid, "other")
            if role == "command":
                continue
            if role in ("harness", "fork server") or role.endswith("keeper"):
                c0, f0 = first[pid]  # between its first and last mark in the lifecycle
                cpu[role].append((c1 - c0) / 1e3)
                faults[role].append(f1 - f0)
            else:  # a process forked for this lifecycle: its CPU since its fork
                cpu[role].append(c1 / 1e3)
                faults[role].append(f1)
    res: dict[str, Any] = {"command": " ".join(command), "n": n}
    for part in CHAINS:
        res[part] = [{"to": b, "hop_ms_p50": round(statistics.median(hops[part][b]), 3)}
                     for b in order[part] if len(hops[part][b]) >= n // 2]
    res["cpu_ms_p50"] = {k: round(statistics.median(v), 3) for k, v in cpu.items()
                         if len(v) >= n // 2}
    res["minor_faults_p50"] = {k: statistics.median(v) for k, v in faults.items()
                               if len(v) >= n // 2}
    res["rss_kb"] = {
        "fork server at a fork (p50)": statistics.median(
            [int(e[5].split()[1]) for e in events if e[2] == "fork >" and e[1] == server_pid]
            or [0]),
        "keeper at a fork (p50)": statistics.median(
            [int(e[5].split()[1]) for e in events if e[2] == "fork >" and e[1] != server_pid]
            or [0])}
    return res


async def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--timeline-n", type=int, default=30)
    ap.add_argument("--timeline-only", action="store_true")
    args = ap.parse_args()
    out: dict[str, object] = {}
    if args.timeline_n:
        out["timeline_true"] = await timeline(args.timeline_n, ["true"])
        out["timeline_date"] = await timeline(max(10, args.timeline_n // 2), ["date", "+%s%N"])
    if args.timeline_only:
        return out
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
    out["seccomp_build_program_ms"] = round(compile_ms, 3)
    for tag in ("default", "limits"):
        out[tag] = {k.split("|", 1)[1]: round(statistics.median(v) * 1000, 2)
                    for k, v in sorted(TIMES.items()) if k.startswith(tag + "|")}
    out["chain_pieces_p50_ms"] = chain_pieces(max(10, args.n // 2))
    return out


if __name__ == "__main__":
    res = asyncio.run(main())
    for k, v in res.items():
        if isinstance(v, dict) and "exec" in v:
            print(f"{k} (p50 of {v['n']} lifecycles; each hop: ms from the mark before it)",
                  file=sys.stderr)
            for part in ("start", "exec", "stop"):
                print(f"  {part}: {sum(h['hop_ms_p50'] for h in v[part]):.3f} ms in all",
                      file=sys.stderr)
                for h in v[part]:
                    print(f"    {h['hop_ms_p50']:+8.3f}  {h['to']}", file=sys.stderr)
            for kk in ("cpu_ms_p50", "minor_faults_p50", "rss_kb"):
                print(f"  {kk}: {v[kk]}", file=sys.stderr)
        elif isinstance(v, dict):
            print(k, file=sys.stderr)
            for kk, vv in v.items():
                print(f"  {kk:50s} {vv}", file=sys.stderr)
        else:
            print(f"{k}: {v}", file=sys.stderr)
    print(json.dumps(res))

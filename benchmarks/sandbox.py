"""Sandbox benchmark: lifecycle cost of the local and Docker backends vs a bare process spawn,
the same with a trial's default limits (cgroup + tmpfs upper dir), each also with spare
sandboxes (``LocalBackend(spares=2)``: started ahead, local_spares.py; cases taking turns),
snapshot+diff of a 5,000-file workspace, layer cache miss vs hit, start cost vs layer size, and
the first and the cached start of a task on an OCI image from a registry (local backend: a
loopback ``docker-registry`` this script starts, holding the Debian base pushed as an image).

All figures are measured in this one run. Prints a human summary, then a final JSON line.
Usage: python benchmarks/sandbox.py [--n 50] [--docker-n 15] [--no-docker] [--no-oci]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

from oci_registry import Registry, push_rootfs

from agentmeter.sandbox import oci, rootfs
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import (
    DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB,
    DEFAULT_PIDS,
    LayerSpec,
    Limits,
    SandboxSpec,
)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 50) * 1000, 2), "p95_ms": round(pct(xs, 95) * 1000, 2),
            "mean_ms": round(statistics.fmean(xs) * 1000, 2), "n": len(xs)}


async def lifecycle(backend, spec: SandboxSpec, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    await backend.prepare(spec)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        sb = await backend.start(spec)
        r = await sb.exec(["true"])
        await sb.stop()
        out.append(time.perf_counter() - t)
        assert r.exit_code == 0
    return out


async def oci_start(local: LocalBackend, n: int) -> dict[str, object]:
    """A task whose Dockerfile is FROM an image in a loopback registry: its first start (copy,
    unpack, shift, the task's and the adapt layer) and its cached starts (lifecycle)."""
    with Registry() as registry:
        ref = f"{registry}/bench/debian-like:{time.time_ns()}"
        t = time.perf_counter()
        # a unique top layer: a new manifest digest, so nothing of it is cached yet
        push_rootfs(ref, rootfs.ensure_debian_base(), note=ref)
        push_s = time.perf_counter() - t
        spec = SandboxSpec(layers=(LayerSpec(
            kind="dockerfile", origin="bench/Dockerfile",
            source=f"FROM {ref}\nRUN useradd -m -u 1000 agent && mkdir /app\nWORKDIR /app\n"),))
        t = time.perf_counter()
        sb = await local.start(spec)
        r = await sb.exec(["cat", "/etc/agentmeter-bench-note"])
        await sb.stop()
        first = time.perf_counter() - t
        assert r.stdout.strip() == ref, r
        cached = await lifecycle(local, spec, n)
        img = oci.cached(ref)  # the unique image's tree is of no further use
        if img is not None:
            shutil.rmtree(img.rootfs.parent, ignore_errors=True)
    return {"image_mb": round(_tree_mb(rootfs.ensure_debian_base()), 1),
            "push_s": round(push_s, 2), "first_start_s": round(first, 2),
            "cached": summary(cached)}


def _tree_mb(root: object) -> float:
    out = subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True).stdout
    return float(out.split()[0]) if out else 0.0


async def main() -> dict[str, object]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--docker-n", type=int, default=15)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--no-oci", action="store_true")
    args = ap.parse_args()
    result: dict[str, object] = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                                             "python": platform.python_version()}}

    bare = []
    for _ in range(args.n):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        bare.append(time.perf_counter() - t)
    result["bare_spawn"] = summary(bare)

    local = LocalBackend()
    spared = LocalBackend(spares=2)  # sandboxes started ahead for a spec that starts again
    # a trial's default limits: a cgroup (memory, pids) and a tmpfs upper dir (disk)
    limited = SandboxSpec(limits=Limits(memory_mb=DEFAULT_MEMORY_MB, pids=DEFAULT_PIDS,
                                        disk_mb=DEFAULT_DISK_MB))
    cases = {"local_lifecycle": (local, SandboxSpec()),
             "local_lifecycle_limits": (local, limited),
             "local_lifecycle_spares": (spared, SandboxSpec()),
             "local_lifecycle_limits_spares": (spared, limited)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(5):  # taking turns, so that the machine's load falls on each alike
        for name, (backend, spec) in cases.items():
            times[name] += await lifecycle(backend, spec, max(2, args.n // 5))
    await spared.close()
    for name, xs in times.items():
        result[name] = summary(xs)

    # snapshot + diff of 5,000 files
    sb = await local.start(SandboxSpec())
    await sb.exec("for d in $(seq 50); do mkdir -p d$d; "
                  "for f in $(seq 100); do echo $d-$f > d$d/f$f; done; done")
    await sb.exec("touch -d '2020-01-01' -- d*/f*")  # settled files: no racy hashing
    t = time.perf_counter()
    snap = await sb.snapshot()
    t_snap = time.perf_counter() - t
    await sb.exec("for d in $(seq 10); do echo changed > d$d/f1; rm d$d/f2; echo n > d$d/new; done")
    t = time.perf_counter()
    diff = await sb.diff(snap)
    t_diff = time.perf_counter() - t
    await sb.stop()
    assert len(snap.entries) == 5050 and len(diff.created) == 10 and len(diff.deleted) == 10
    result["diff_5000_files"] = {"snapshot_ms": round(t_snap * 1000, 1), "diff_ms": round(t_diff * 1000, 1),
                                 "snapshot_plus_diff_ms": round((t_snap + t_diff) * 1000, 1)}

    # layer cache: miss (build) vs hit, and start cost with a small vs a 300 MB layer
    tag = time.time_ns()
    small = SandboxSpec(layers=(LayerSpec(kind="script", source=f"echo {tag} > /opt/small", network="none"),))
    big = SandboxSpec(layers=(LayerSpec(kind="script", network="none",
                                        source=f"echo {tag}; head -c 300M /dev/urandom > /opt/big"),))
    t = time.perf_counter()
    await local.prepare(small)
    miss = time.perf_counter() - t
    t = time.perf_counter()
    await local.prepare(small)
    hit = time.perf_counter() - t
    await local.prepare(big)
    small_starts = await lifecycle(local, small, max(10, args.n // 2))
    big_starts = await lifecycle(local, big, max(10, args.n // 2))
    result["layer_cache"] = {"miss_ms": round(miss * 1000, 1), "hit_ms": round(hit * 1000, 2)}
    result["start_vs_layer_size"] = {"small_layer": summary(small_starts),
                                     "layer_300MB": summary(big_starts)}

    if not args.no_oci:
        result["oci_image_start"] = await oci_start(local, args.n)

    if not args.no_docker:
        try:
            from agentmeter.sandbox.docker import DockerBackend
            from agentmeter.sandbox.dockerd import ensure_dockerd

            daemon = ensure_dockerd()
            try:
                result["docker_lifecycle"] = summary(await lifecycle(DockerBackend(), SandboxSpec(),
                                                                     args.docker_n))
            finally:
                daemon.stop()
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            result["docker_lifecycle"] = {"error": str(e)}
    loc = result["local_lifecycle"]["p50_ms"]  # type: ignore[index]
    dock = result.get("docker_lifecycle", {})
    spare = result["local_lifecycle_spares"]["p50_ms"]  # type: ignore[index]
    targets = {"local_p50_le_25ms": loc <= 25, "local_p50_le_10ms": loc <= 10,
               "local_spares_p50_le_10ms": spare <= 10}
    if isinstance(dock, dict) and "p50_ms" in dock:
        targets["local_10x_faster_than_docker"] = dock["p50_ms"] / loc >= 10
        targets["local_25x_faster_than_docker"] = dock["p50_ms"] / loc >= 25
        targets["local_spares_25x_faster_than_docker"] = dock["p50_ms"] / spare >= 25
        result["docker_over_local_p50"] = round(dock["p50_ms"] / loc, 1)
        result["docker_over_local_spares_p50"] = round(dock["p50_ms"] / spare, 1)
    oci = result.get("oci_image_start")
    if isinstance(oci, dict) and "cached" in oci:
        targets["oci_cached_start_within_2x_local"] = oci["cached"]["p50_ms"] <= 2 * loc
    targets["diff_5000_le_100ms"] = result["diff_5000_files"]["snapshot_plus_diff_ms"] <= 100  # type: ignore[index]
    result["targets_met"] = targets
    return result


if __name__ == "__main__":
    res = asyncio.run(main())
    for k, v in res.items():
        print(f"{k}: {v}", file=sys.stderr)
    print(json.dumps(res))

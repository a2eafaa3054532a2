"""Differential-testing benchmark: the difftest engine's per-case overhead against a fresh
``docker run`` per case, and FM (fuzzy match) on two 100 KB outputs.

1. Engine: a CLI-generation task of ``--cases`` (≥ 500) cases for the ``greet`` oracle of
   tests/difftest_tasks.py, whose reference solution is the oracle's own source. One local
   sandbox is built from the task's environment and staged as the verifier stages it; the
   reference solution runs as the agent; the real engine (verify/difftest/engine.py) runs as the
   verifier runs it; its DIR/cases.jsonl is read back and compared on the host
   (compare.parse_records + compare.outcomes). Per-case overhead = the engine's wall_s − the
   oracle's and the candidate's own command time (duration_s), + the host-side parse and compare
   time per case. The engine's per-phase timings (restore_s, manifest_s) say where it goes.
2. Docker: the same task image, with the same candidate installed the way the engine installs it
   (a venv under /difftest/candidate), committed once; then each case in a fresh
   ``docker run --rm``: write the case's files, run the oracle's command as uid 1001 and the
   candidate's as uid 1000 from a fresh /test_data, print both outputs and the files' hashes.
   Overhead = wall − both commands' own time (taken inside the container around each command).
   ``--docker-cases`` of the cases (spread over the classes), in the same run.
3. FM: metrics.funnel.fuzzy_match and similarity on two ~100 KB outputs: identical, a few edits,
   2 % of the characters changed at scattered places, the same lines in another order.

Prints a human summary on stderr, then a final JSON line.
Usage: python benchmarks/difftest.py [--cases 500] [--docker-cases 100] [--no-docker]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from difftest_tasks import make_difftest_task  # noqa: E402

from agentmeter.agents.registry import make_agent  # noqa: E402
from agentmeter.metrics import funnel  # noqa: E402
from agentmeter.runner.tasksandbox import sandbox_spec  # noqa: E402
from agentmeter.sandbox.local import LocalBackend  # noqa: E402
from agentmeter.sandbox.protocol import Sandbox  # noqa: E402
from agentmeter.sandbox.spec import AGENT_USER  # noqa: E402
from agentmeter.tasks.models import SOLUTION_MOUNT, Task  # noqa: E402
from agentmeter.tasks.suite import load_task  # noqa: E402
from agentmeter.verify.command import TESTS_MOUNT, unstage_verifier  # noqa: E402
from agentmeter.verify.difftest import compare  # noqa: E402
from agentmeter.verify.difftest.config import class_keys, read_cases  # noqa: E402
from agentmeter.verify.difftest.verifier import (  # noqa: E402
    ENGINE_DIR,
    OUT_DIR,
    DifftestVerifier,
    _staged,
)

NAMES = ("ada", "bob", "zoë", "x y", "Ω", "li", "o'neil", "a-b", "Q", "longer name here")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary_ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 50) * 1000, 2), "p95_ms": round(pct(xs, 95) * 1000, 2),
            "mean_ms": round(statistics.fmean(xs) * 1000, 2), "n": len(xs)}


def bench_cases(n: int) -> list[dict[str, Any]]:
    """``n`` cases over the greet oracle's four classes (hello, hello --shout, count, write),
    with fixture files for count; a few fail for the oracle (a missing file)."""
    rng = random.Random(13)
    cases: list[dict[str, Any]] = []
    for i in range(n):
        kind = i % 4
        name = NAMES[rng.randrange(len(NAMES))] + ("" if i < 40 else str(i))
        files: dict[str, str] = {}
        if kind == 0:
            cls, cmd = "greet hello <name>", f"greet hello {shlex.quote(name)}"
        elif kind == 1:
            cls, cmd = "greet hello <name> --shout", f"greet hello {shlex.quote(name)} --shout"
        elif kind == 2:
            words = " ".join(rng.choice(NAMES) for _ in range(rng.randrange(1, 200)))
            files = {"notes.txt": words.replace(" ", "\n", rng.randrange(0, 20)) + "\n",
                     f"d{i % 7}/other.txt": "x\n"}
            target = "missing.txt" if i % 40 == 2 else "notes.txt"  # the oracle fails
            cls, cmd = "greet count <file>", f"greet count {target}"
        else:
            target = f"out{i}.txt" if i % 3 else f"sub{i % 5}/w.txt"
            files = {f"sub{i % 5}/keep.txt": "keep\n"} if i % 8 == 3 else {}
            cls, cmd = "greet write <file> <text>", f"greet write {target} {shlex.quote(name)}"
        cases.append({"id": f"c{i + 1:04d}", "class": cls, "command": cmd, "files": files})
    return cases


async def install_reference(task: Task, sb: Sandbox) -> None:
    """What the oracle agent does: the reference solution's files, then its command."""
    for rel, host in task.solution_files().items():
        await sb.write_file(f"{SOLUTION_MOUNT}/{rel}", host.read_bytes(), mode=0o755)
    assert task.solution_command is not None
    r = await sb.exec(task.solution_command, user=AGENT_USER, env=task.solution_env)
    assert r.exit_code == 0, r.stderr


# --- 1. the engine in a local sandbox -----------------------------------------------------------

async def engine_bench(task: Task) -> dict[str, Any]:
    backend = LocalBackend()
    spec = sandbox_spec(task, make_agent("oracle"), None)
    t = time.perf_counter()
    await backend.prepare(spec)
    prepare_s = time.perf_counter() - t
    sb = await backend.start(spec)
    try:
        await sb.exec(["chown", "-R", "1000:1000", sb.workdir], user="root")
        await DifftestVerifier().stage(task, sb)
        await install_reference(task, sb)
        # from here as DifftestVerifier.verify does it
        assert task.difftest is not None
        cfg = task.difftest
        cases = read_cases(task.tests_dir / cfg.cases)
        await unstage_verifier(task, sb, extra=_staged(task, sb))
        engine = f"{TESTS_MOUNT}/{ENGINE_DIR}"
        t = time.perf_counter()
        r = await sb.exec(["python3", f"{engine}/engine.py", "--config", f"{engine}/config.json",
                           "--cases", f"{TESTS_MOUNT}/{cfg.cases}", "--out", OUT_DIR],
                          user="root", cwd="/", timeout=3600)
        engine_s = time.perf_counter() - t
        assert r.exit_code == 0, r.stderr
        t = time.perf_counter()
        build = compare.BuildRecord.model_validate_json(
            await sb.read_file(f"{OUT_DIR}/build.json"))
        raw = (await sb.read_file(f"{OUT_DIR}/cases.jsonl", max_bytes=256 << 20)).decode()
        read_s = time.perf_counter() - t
    finally:
        await sb.stop()
    t = time.perf_counter()
    records, unreadable = compare.parse_records(raw)
    parse_s = time.perf_counter() - t
    t = time.perf_counter()
    results = compare.outcomes(cases, records, cfg, class_keys(cases))
    outcomes_s = time.perf_counter() - t
    assert build.build and not unreadable and len(records) == len(cases)
    valid = [o for o in results if o.status == "valid"]
    assert valid and all(o.em and o.side_effects for o in valid), "the oracle's source differs"
    host_per_case = (parse_s + outcomes_s) / len(cases)
    overhead: list[float] = []
    phases: dict[str, list[float]] = {"restore_s": [], "manifest_s": [], "run_s": [],
                                      "rest_s": []}
    for line in raw.splitlines():
        rec = json.loads(line)
        own = rec["oracle"]["duration_s"] + rec["candidate"]["duration_s"]
        overhead.append(rec["wall_s"] - own + host_per_case)
        tm = [rec[s]["timings"] for s in ("oracle", "candidate")]
        restore = sum(x["restore_s"] for x in tm)
        manifest = sum(x["manifest_s"] for x in tm)
        # inside run_as but not the command: io dir, Popen, reading the streams, kill_uid sweep
        run = sum(x["total_s"] for x in tm) - restore - manifest - own
        phases["restore_s"].append(restore)
        phases["manifest_s"].append(manifest)
        phases["run_s"].append(run)
        phases["rest_s"].append(rec["wall_s"] - sum(x["total_s"] for x in tm))
    oracle_own = [json.loads(ln)["oracle"]["duration_s"] for ln in raw.splitlines()]
    all_own = sum(json.loads(ln)[s]["duration_s"] for ln in raw.splitlines()
                  for s in ("oracle", "candidate"))
    # the whole engine run (its start, the cases, the end) less the install and the commands,
    # plus reading the results back and the host-side compare, per case
    amortized = (engine_s - (build.duration_s or 0.0) - all_own + read_s) / len(cases) \
        + host_per_case
    return {
        "cases": len(cases), "valid": len(valid), "build": build.build,
        "oracle_failed": sum(o.status == "oracle_failed" for o in results),
        "overhead": summary_ms(overhead),
        "amortized_overhead_ms": round(amortized * 1000, 2),
        "phases_p50_ms": {k: round(pct(v, 50) * 1000, 2) for k, v in phases.items()},
        "phases_mean_ms": {k: round(statistics.fmean(v) * 1000, 2) for k, v in phases.items()},
        "oracle_command_p50_ms": round(pct(oracle_own, 50) * 1000, 2),
        "host_compare_per_case_ms": round(host_per_case * 1000, 3),
        "engine_exec_s": round(engine_s, 2), "install_s": round(build.duration_s or 0.0, 2),
        "read_results_s": round(read_s, 3), "environment_prepare_s": round(prepare_s, 1),
        "results_bytes": len(raw),
    }


# --- 2. a fresh docker run per case -------------------------------------------------------------

CASE_SCRIPT = r"""
set -u
export LANG=C.UTF-8 TZ=UTC
side() {  # name uid bin command
  rm -rf /test_data; mkdir -p /test_data
  printf %s "$FIXTURES" | base64 -d | tar -C /test_data -xf - 2>/dev/null
  chown -R "$2:$2" /test_data
  h=/tmp/home-$1; mkdir -p "$h"; chown "$2:$2" "$h"
  cd /test_data
  t0=$EPOCHREALTIME
  setpriv --reuid="$2" --regid="$2" --clear-groups --no-new-privs env -i \
    PATH="$3:/usr/local/bin:/usr/bin:/bin" HOME="$h" LANG=C.UTF-8 TZ=UTC \
    sh -c "$4" >/tmp/$1.out 2>/tmp/$1.err </dev/null
  code=$?
  t1=$EPOCHREALTIME
  echo "@@ $1 $code $t0 $t1"
  base64 -w0 /tmp/$1.out; echo
  find /test_data "$h" -type f -exec sha256sum {} + | sort
}
side oracle 1001 /opt/oracle/bin "$ORACLE_CMD"
side candidate 1000 /difftest/candidate/venv/bin "$CANDIDATE_CMD"
"""


def fixtures_tar(files: dict[str, str]) -> str:
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, text in files.items():
            data = text.encode()
            ti = tarfile.TarInfo(rel)
            ti.size, ti.mode = len(data), 0o644
            tar.addfile(ti, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode() if files else ""


async def docker_bench(task: Task, cases: list[dict[str, Any]]) -> dict[str, Any]:
    from agentmeter.sandbox.docker import DockerBackend
    from agentmeter.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()  # the one already running; never stopped here
    backend = DockerBackend()
    spec = sandbox_spec(task, make_agent("oracle"), None)
    t = time.perf_counter()
    await backend.prepare(spec)
    prepare_s = time.perf_counter() - t
    tag = f"agentmeter-bench-difftest:{uuid.uuid4().hex[:12]}"
    sb = await backend.start(spec)
    try:
        await sb.exec(["chown", "-R", "1000:1000", sb.workdir], user="root")
        await install_reference(task, sb)
        r = await sb.exec("python3 -m venv /difftest/candidate/venv && "
                          "/difftest/candidate/venv/bin/pip install -q /app", user="root")
        assert r.exit_code == 0, r.stderr
        subprocess.run(["docker", "commit", sb.container_id, tag], check=True,
                       capture_output=True)
    finally:
        await sb.stop()
    assert task.difftest is not None
    old, new = task.difftest.oracle_name, task.difftest.cli_name
    overhead, walls, mismatches = [], [], 0
    try:
        for case in cases:
            env = {"FIXTURES": fixtures_tar(case["files"]), "ORACLE_CMD": case["command"],
                   "CANDIDATE_CMD": case["command"].replace(old, new, 1)}
            args = ["docker", "run", "--rm", "--network", "none", "--security-opt",
                    "no-new-privileges", "-u", "0:0", "--entrypoint", ""]
            for k, v in env.items():
                args += ["-e", f"{k}={v}"]
            t = time.perf_counter()
            p = subprocess.run([*args, tag, "bash", "-c", CASE_SCRIPT], capture_output=True,
                               text=True)
            wall = time.perf_counter() - t
            assert p.returncode == 0, p.stderr
            own, outs = 0.0, []
            for block in p.stdout.split("@@ ")[1:]:
                head, _, rest = block.partition("\n")
                _, _, t0, t1 = head.split()
                own += float(t1) - float(t0)
                outs.append(rest.replace("/tmp/home-oracle", "H").replace("/tmp/home-candidate",
                                                                          "H"))
            assert len(outs) == 2, p.stdout
            mismatches += outs[0] != outs[1]
            walls.append(wall)
            overhead.append(wall - own)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    return {"cases": len(cases), "overhead": summary_ms(overhead), "wall": summary_ms(walls),
            "output_mismatches": mismatches, "environment_prepare_s": round(prepare_s, 1)}


# --- 3. FM on two 100 KB outputs ----------------------------------------------------------------

def fm_bench(reps: int) -> dict[str, Any]:
    rng = random.Random(7)
    lines = [f"{i:05d} " + " ".join(rng.choice(NAMES) for _ in range(rng.randrange(3, 12)))
             for i in range(3000)]
    base = "\n".join(lines)
    while len(base) < 100_000:
        base += "\n" + base[: 100_000 - len(base)]
    base = base[:100_000]

    def edited(frac: float | None, count: int = 0) -> str:
        chars = list(base)
        n = count if frac is None else int(len(chars) * frac)
        for pos in rng.sample(range(len(chars)), n):
            chars[pos] = rng.choice("abcdefXYZ#")
        return "".join(chars)

    shuffled = base.split("\n")
    rng.shuffle(shuffled)
    pairs = {"identical": base[:], "few_edits": edited(None, 5), "scattered_2pct": edited(0.02),
             "reordered_lines": "\n".join(shuffled)}
    out: dict[str, Any] = {"bytes": len(base.encode())}
    for label, other in pairs.items():
        fm, sim = [], []
        for _ in range(reps):
            t = time.perf_counter()
            match = funnel.fuzzy_match(base, other)
            fm.append(time.perf_counter() - t)
            t = time.perf_counter()
            s = funnel.similarity(base, other)
            sim.append(time.perf_counter() - t)
        out[label] = {"fuzzy_match_ms": round(pct(fm, 50) * 1000, 3),
                      "similarity_ms": round(pct(sim, 50) * 1000, 3), "fm": match,
                      "similarity": round(s, 4)}
    return out


# --- main ---------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


async def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--docker-cases", type=int, default=100)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--fm-reps", type=int, default=20)
    args = ap.parse_args()
    res: dict[str, Any] = {"machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        d = make_difftest_task(Path(tmp), "greet-bench")
        cases = bench_cases(args.cases)
        (d / "tests" / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
        task = load_task(d)
        res["engine"] = await engine_bench(task)
        print(f"engine: {res['engine']}", file=sys.stderr)
        if not args.no_docker:
            step = max(1, len(cases) // max(1, args.docker_cases))
            res["docker"] = await docker_bench(task, cases[::step][: args.docker_cases])
            print(f"docker: {res['docker']}", file=sys.stderr)
    res["fm_100kb"] = fm_bench(args.fm_reps)
    eng = res["engine"]["overhead"]["p50_ms"]
    targets: dict[str, bool] = {"engine_p50_le_30ms": eng <= 30}
    if "docker" in res:
        ratio = res["docker"]["overhead"]["p50_ms"] / eng
        res["docker_over_engine_p50"] = round(ratio, 1)
        targets["engine_10x_faster_than_docker"] = ratio >= 10
    targets["fm_100kb_le_5ms"] = all(v["fuzzy_match_ms"] <= 5 for k, v in res["fm_100kb"].items()
                                     if isinstance(v, dict))
    res["targets_met"] = targets
    res["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    return res


if __name__ == "__main__":
    out = asyncio.run(main())
    for key, value in out.items():
        print(f"{key}: {value}", file=sys.stderr)
    print(json.dumps(out, ensure_ascii=False))

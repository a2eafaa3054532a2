import json
import os
import random
import subprocess
import sys

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user
#: run as the agent: the agent's module is never imported into this (root) process
RUNNER = """
import json, sys
sys.path.insert(0, "/app")
from intervals import free_slots, merge
out = []
for busy, ds, de, ml in json.load(sys.stdin):
    busy = [tuple(b) for b in busy]
    orig = list(busy)
    try:
        m, f = merge(busy), free_slots(busy, ds, de, ml)
        out.append({"merge": [list(x) for x in m], "free": [list(x) for x in f],
                    "modified": busy != orig})
    except Exception as e:
        out.append({"error": repr(e)})
print()
print(json.dumps(out))
"""


def ref_merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def ref_free(busy: list[tuple[int, int]], ds: int, de: int, ml: int) -> list[tuple[int, int]]:
    free, cur = [], ds
    for s, e in ref_merge(busy):
        s, e = max(s, ds), min(e, de)
        if s >= e:
            continue
        if s - cur >= ml:
            free.append((cur, s))
        cur = max(cur, e)
    if de - cur >= ml:
        free.append((cur, de))
    return free


fixed = [
    ([(1, 3), (3, 5)], 0, 10, 1), ([(1, 10), (2, 3), (4, 6)], 0, 12, 2), ([(5, 8)], 0, 10, 5),
    ([(-30, 30), (100, 2000)], 0, 480, 10), ([], 0, 60, 60), ([(0, 60)], 0, 60, 1),
    ([(50, 70), (10, 20)], 30, 40, 10), ([(9, 10)], 0, 20, 9), ([(600, 700)], 0, 480, 30),
]
r = random.Random(42)
cases = list(fixed)
for _ in range(400):
    busy = []
    for _ in range(r.randint(0, 7)):
        s = r.randint(-20, 120)
        busy.append((s, s + r.randint(1, 40)))
    ds = r.randint(0, 40)
    cases.append((busy, ds, ds + r.randint(1, 100), r.randint(1, 15)))
r = subprocess.run([AS, sys.executable, "-c", RUNNER], cwd="/app", input=json.dumps(cases),
                   capture_output=True, text=True, timeout=60)
try:
    results = json.loads(r.stdout.strip().rsplit("\n", 1)[-1])
    assert isinstance(results, list) and len(results) == len(cases)
except (ValueError, AssertionError, IndexError):
    sys.exit(f"the intervals module could not be run: rc={r.returncode} {r.stderr[-800:]}")
for (busy, ds, de, ml), got in zip(cases, results):
    if not isinstance(got, dict) or "error" in got:
        sys.exit(f"exception on {busy}: {got}")
    if got.get("modified") is not False:
        sys.exit("input was modified")
    got_m, got_f = got.get("merge"), got.get("free")
    if not isinstance(got_m, list) or [tuple(x) for x in got_m] != ref_merge(busy):
        sys.exit(f"merge({busy}) = {got_m}, want {ref_merge(busy)}")
    if not isinstance(got_f, list) or [tuple(x) for x in got_f] != ref_free(busy, ds, de, ml):
        sys.exit(f"free_slots({busy}, {ds}, {de}, {ml}) = {got_f}, want {ref_free(busy, ds, de, ml)}")
t = subprocess.run([AS, sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd="/app",
                   capture_output=True, text=True)
if t.returncode != 0:
    sys.exit(f"unit tests fail: {t.stderr}")
print(f"ok ({len(cases)} cases)")

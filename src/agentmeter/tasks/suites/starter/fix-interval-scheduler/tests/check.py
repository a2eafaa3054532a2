import random
import subprocess
import sys

sys.path.insert(0, "/app")
try:
    from intervals import free_slots, merge
except Exception as e:  # noqa: BLE001
    sys.exit(f"import failed: {e}")


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
for busy, ds, de, ml in cases:
    orig = list(busy)
    try:
        got_m = merge(busy)
        got_f = free_slots(busy, ds, de, ml)
    except Exception as e:  # noqa: BLE001
        sys.exit(f"exception on {busy}: {e!r}")
    if busy != orig:
        sys.exit("input was modified")
    if [tuple(x) for x in got_m] != ref_merge(busy):
        sys.exit(f"merge({busy}) = {got_m}, want {ref_merge(busy)}")
    if [tuple(x) for x in got_f] != ref_free(busy, ds, de, ml):
        sys.exit(f"free_slots({busy}, {ds}, {de}, {ml}) = {got_f}, want {ref_free(busy, ds, de, ml)}")
t = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd="/app",
                   capture_output=True, text=True)
if t.returncode != 0:
    sys.exit(f"unit tests fail: {t.stderr}")
print(f"ok ({len(cases)} cases)")

import math
import os
import subprocess
import sys

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

if open("/app/stats.c").read() != open("/tests/stats.c").read():
    sys.exit("stats.c was modified")
subprocess.run([AS, "rm", "-f", "/app/stats", "/app/stats.o"])
b = subprocess.run([AS, "make", "-C", "/app"], capture_output=True, text=True)
if b.returncode != 0:
    sys.exit(f"make failed:\n{b.stdout}\n{b.stderr}")
for nums in ([2, 4, 4, 4, 5, 5, 7, 9], [1.5], [-3, 10.25, 7, 1e3], list(range(1, 101))):
    inp = " ".join(map(str, nums))
    r = subprocess.run([AS, "/app/stats"], input=inp, capture_output=True, text=True)
    n = len(nums)
    mean = sum(nums) / n
    sd = math.sqrt(max(0.0, sum(x * x for x in nums) / n - mean * mean))
    want = f"n={n} mean={mean:.3f} sd={sd:.3f}"
    if r.returncode != 0 or r.stdout.strip() != want:
        sys.exit(f"input {inp!r}: got {r.stdout!r} rc={r.returncode}, want {want!r}")
print("ok")

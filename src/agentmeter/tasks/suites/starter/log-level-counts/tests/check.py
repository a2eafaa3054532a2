import collections
import re
import sys

counts: collections.Counter[str] = collections.Counter()
with open("/tests/server.log.orig") as f:
    for line in f:
        m = re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[([A-Z]+)\] ", line)
        if m:
            counts[m.group(1)] += 1
expected = [f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
try:
    got = open("/app/level_counts.txt").read().strip("\n").split("\n")
except OSError as e:
    sys.exit(f"cannot read output: {e}")
got = [g.rstrip() for g in got]
if got != expected:
    sys.exit(f"mismatch:\n got {got}\n want {expected}")
if open("/app/server.log").read() != open("/tests/server.log.orig").read():
    sys.exit("server.log was modified")
print("ok")

#!/bin/bash
set -euo pipefail
cd /app
cat > logsummary <<'PY'
#!/usr/bin/env python3
import collections
import re
import sys

LINE = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\S+) (\S+) [^"]*" (\d{3}) (\d+|-) "[^"]*" "[^"]*"$')
ips = collections.Counter()
paths = collections.Counter()
total = bad = s5 = nbytes = 0
with open(sys.argv[1]) as f:
    for line in f:
        line = line.rstrip("\n")
        if not line:
            continue
        m = LINE.match(line)
        if not m:
            bad += 1
            continue
        total += 1
        ips[m.group(1)] += 1
        paths[m.group(3).split("?", 1)[0]] += 1
        s5 += m.group(4).startswith("5")
        nbytes += 0 if m.group(5) == "-" else int(m.group(5))
top = sorted(ips.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
top_path = min(paths.items(), key=lambda kv: (-kv[1], kv[0]))[0] if paths else "-"
print(f"total_requests {total}")
print(f"malformed {bad}")
print(f"unique_ips {len(ips)}")
print("top_ips " + ",".join(f"{k}:{v}" for k, v in top))
print(f"status_5xx {s5}")
print(f"bytes_total {nbytes}")
print(f"top_path {top_path}")
PY
chmod +x logsummary
./logsummary access.log

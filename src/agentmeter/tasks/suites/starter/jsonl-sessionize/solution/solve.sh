#!/bin/bash
set -euo pipefail
cd /app
cat > sessionize <<'PY'
#!/usr/bin/env python3
import datetime as dt
import json
import sys

FMT = "%Y-%m-%dT%H:%M:%SZ"
per = {}
with open(sys.argv[1]) as f:
    for line in f:
        try:
            o = json.loads(line)
            u = o["user"]
            t = dt.datetime.strptime(o["ts"], FMT)
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(u, str):
            per.setdefault(u, []).append(t)
print("user,start,end,events,duration_sec")
for u in sorted(per):
    sessions = []
    for t in sorted(per[u]):
        if sessions and (t - sessions[-1][1]).total_seconds() <= 1800:
            sessions[-1][1] = t
            sessions[-1][2] += 1
        else:
            sessions.append([t, t, 1])
    for s, e, n in sessions:
        print(f"{u},{s.strftime(FMT)},{e.strftime(FMT)},{n},{int((e - s).total_seconds())}")
PY
chmod +x sessionize
./sessionize events.jsonl > /tmp/sessions.csv
head -n 5 /tmp/sessions.csv

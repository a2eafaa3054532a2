#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
import collections, csv, json
tot = collections.defaultdict(float)
with open("orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        if row["status"] == "completed":
            tot[row["customer"]] += int(row["quantity"]) * float(row["unit_price"])
top = sorted(tot.items(), key=lambda kv: -kv[1])[:3]
json.dump([{"customer": c, "revenue": round(v, 2)} for c, v in top], open("top_customers.json", "w"), indent=2)
PY
cat top_customers.json

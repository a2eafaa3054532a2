import collections
import csv
import json
import sys

tot: collections.defaultdict[str, float] = collections.defaultdict(float)
with open("/tests/orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        if row["status"] == "completed":
            tot[row["customer"]] += int(row["quantity"]) * float(row["unit_price"])
want = sorted(tot.items(), key=lambda kv: -kv[1])[:3]
try:
    got = json.load(open("/app/top_customers.json"))
except (OSError, ValueError) as e:
    sys.exit(f"cannot load output: {e}")
if not isinstance(got, list) or len(got) != 3:
    sys.exit(f"expected a list of 3, got {got!r}")
for g, (name, rev) in zip(got, want):
    if not isinstance(g, dict) or set(g) != {"customer", "revenue"}:
        sys.exit(f"bad entry {g!r}")
    if g["customer"] != name or not isinstance(g["revenue"], (int, float)):
        sys.exit(f"bad entry {g!r}, want {name!r}")
    if abs(g["revenue"] - round(rev, 2)) > 0.0051:
        sys.exit(f"bad revenue {g!r}, want {rev:.2f}")
print("ok")

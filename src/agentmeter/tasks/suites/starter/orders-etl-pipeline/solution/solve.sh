#!/bin/bash
set -euo pipefail
cd /app
cat > etl <<'PY'
#!/usr/bin/env python3
import csv
import json
import os
import re
import sqlite3
import sys

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]


def parse_date(s):
    s = s.strip()
    if re.fullmatch(r"\d{4}-\d\d-\d\d", s):
        return s
    m = re.fullmatch(r"(\d\d)/(\d\d)/(\d{4})", s)
    if m:
        return f"{m.group(3)}-{m.group(2)}-{m.group(1)}"
    m = re.fullmatch(r"([A-Za-z]+) (\d{1,2}), (\d{4})", s)
    if not m:
        raise ValueError(f"bad date {s!r}")
    return f"{m.group(3)}-{MONTHS.index(m.group(1).lower()) + 1:02d}-{int(m.group(2)):02d}"


def to_cents(s):
    s = s.strip().lstrip("$").replace(",", "")
    whole, _, frac = s.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
customers = {}
with open(os.path.join(src, "customers.csv"), newline="") as f:
    for r in csv.DictReader(f):
        cid = int(r["id"])
        customers[cid] = (cid, r["name"].strip(), r["email"].strip().lower(), r["country"].strip().upper())
orders = {}
with open(os.path.join(src, "orders.csv"), newline="") as f:
    for r in csv.DictReader(f):
        oid, cid = int(r["order_id"]), int(r["customer_id"])
        orders.pop(oid, None)  # the last row for an order id decides
        if cid in customers:
            orders[oid] = (oid, cid, parse_date(r["order_date"]), to_cents(r["amount"]),
                           r["status"].strip().lower())
db_path = os.path.join(out, "warehouse.db")
if os.path.exists(db_path):
    os.remove(db_path)
db = sqlite3.connect(db_path)
db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, country TEXT)")
db.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER, order_date TEXT, "
           "amount_cents INTEGER, status TEXT)")
db.executemany("INSERT INTO customers VALUES (?,?,?,?)", customers.values())
db.executemany("INSERT INTO orders VALUES (?,?,?,?,?)", orders.values())
db.commit()
q = lambda sql: db.execute(sql).fetchall()
paid = "FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = 'paid'"
n, total = q(f"SELECT COUNT(*), COALESCE(SUM(amount_cents), 0) {paid}")[0]
by_month = dict(q(f"SELECT substr(order_date, 1, 7), COUNT(*) {paid} GROUP BY 1 ORDER BY 1"))
top = q(f"SELECT c.country {paid} GROUP BY c.country ORDER BY SUM(amount_cents) DESC, c.country LIMIT 1")
repeat = q(f"SELECT COUNT(*) FROM (SELECT o.customer_id {paid} GROUP BY o.customer_id HAVING COUNT(*) >= 2)")[0][0]
report = {"paid_orders": n, "total_revenue_cents": total, "orders_by_month": by_month,
          "top_country": top[0][0] if top else None, "repeat_customers": repeat}
db.close()
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
PY
chmod +x etl
./etl /app/data /app/out
cat /app/out/report.json

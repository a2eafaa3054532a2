#!/bin/bash
set -euo pipefail
cd /app
rm -f sales.db
python3 - <<'PY'
import csv, sqlite3
db = sqlite3.connect("sales.db")
db.execute("CREATE TABLE sales (sale_date TEXT, region TEXT, product TEXT, units INTEGER, unit_price REAL)")
with open("sales.csv", newline="") as f:
    rows = [(r["sale_date"], r["region"].strip().title(), r["product"], int(r["units"]), float(r["unit_price"]))
            for r in csv.DictReader(f)]
db.executemany("INSERT INTO sales VALUES (?,?,?,?,?)", rows)
db.execute("""CREATE VIEW monthly_revenue AS
SELECT substr(sale_date, 1, 7) AS month, region, ROUND(SUM(units * unit_price), 2) AS revenue
FROM sales GROUP BY substr(sale_date, 1, 7), region""")
db.commit()
PY
sqlite3 sales.db 'SELECT * FROM monthly_revenue ORDER BY month, region LIMIT 5'

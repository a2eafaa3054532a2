import csv
import shutil
import sqlite3
import sys
import tempfile

REF = """SELECT substr(sale_date, 1, 7), region, ROUND(SUM(units * unit_price), 2) FROM sales
GROUP BY 1, 2 ORDER BY 1, 2"""
rows = []
with open("/tests/sales.csv", newline="") as f:
    for r in csv.DictReader(f):
        rows.append((r["sale_date"], r["region"].strip().title(), r["product"], int(r["units"]),
                     float(r["unit_price"])))
try:
    tmp = tempfile.mkdtemp() + "/s.db"
    shutil.copy("/app/sales.db", tmp)
    db = sqlite3.connect(tmp)
    got = db.execute("SELECT sale_date, region, product, units, unit_price FROM sales "
                     "ORDER BY rowid").fetchall()
    if sorted(got) != sorted(rows):
        sys.exit(f"sales table content differs ({len(got)} rows vs {len(rows)})")
    types = db.execute("SELECT DISTINCT typeof(units), typeof(unit_price), typeof(sale_date) "
                       "FROM sales").fetchall()
    if types != [("integer", "real", "text")]:
        sys.exit(f"bad stored types {types}")
    for extra in ([], [("2024-07-03", "North", "widget", 3, 2.5), ("2024-01-31", "West", "x", 1, 0.125),
                       ("2024-07-09", "North", "gizmo", 2, 1.75)]):
        db.executemany("INSERT INTO sales VALUES (?,?,?,?,?)", extra)
        want = db.execute(REF).fetchall()
        view = db.execute("SELECT month, region, revenue FROM monthly_revenue "
                          "ORDER BY month, region").fetchall()
        if view != want:
            sys.exit(f"view mismatch:\n got {view}\n want {want}")
except sqlite3.Error as e:
    sys.exit(f"sqlite error: {e}")
except OSError as e:
    sys.exit(f"no database: {e}")
print("ok")

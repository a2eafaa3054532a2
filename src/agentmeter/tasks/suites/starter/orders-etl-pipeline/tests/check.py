import json
import os
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, "/tests")
from etlref import etl, generate  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user


def verify(outdir: str, cust_csv: str, ord_csv: str, label: str) -> None:
    customers, orders, report = etl(cust_csv, ord_csv)
    try:
        db = sqlite3.connect(f"file:{outdir}/warehouse.db?mode=ro", uri=True)
        got_c = db.execute("SELECT id, name, email, country FROM customers ORDER BY id").fetchall()
        got_o = db.execute("SELECT order_id, customer_id, order_date, amount_cents, status FROM orders "
                           "ORDER BY order_id").fetchall()
        types = db.execute("SELECT DISTINCT typeof(amount_cents), typeof(customer_id) FROM orders").fetchall()
    except sqlite3.Error as e:
        sys.exit(f"{label}: database error {e}")
    if got_c != customers:
        sys.exit(f"{label}: customers differ\n got {got_c[:5]}\n want {customers[:5]}")
    if got_o != orders:
        diff = [(a, b) for a, b in zip(got_o, orders) if a != b][:3]
        sys.exit(f"{label}: orders differ ({len(got_o)} vs {len(orders)} rows) {diff}")
    if types and types != [("integer", "integer")]:
        sys.exit(f"{label}: wrong stored types {types}")
    try:
        got_r = json.load(open(f"{outdir}/report.json"))
    except (OSError, ValueError) as e:
        sys.exit(f"{label}: report.json: {e}")
    if got_r != report:
        sys.exit(f"{label}: report\n got {got_r}\n want {report}")


verify("/app/out", open("/tests/customers.csv").read(), open("/tests/orders.csv").read(), "/app/out")
if not os.access("/app/etl", os.X_OK):
    sys.exit("/app/etl missing or not executable")
for seed in (1, 2, 3):
    tmp = tempfile.mkdtemp()
    c, o = generate(seed)
    os.makedirs(f"{tmp}/in")
    open(f"{tmp}/in/customers.csv", "w").write(c)
    open(f"{tmp}/in/orders.csv", "w").write(o)
    subprocess.run([AS, "--own", tmp], check=True)
    for _ in range(2):  # second run must replace the outputs
        r = subprocess.run([AS, "/app/etl", f"{tmp}/in", f"{tmp}/out"], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            sys.exit(f"seed {seed}: etl failed {r.stderr[-800:]}")
    verify(f"{tmp}/out", c, o, f"seed {seed}")
print("ok")

"""Dataset generator and reference ETL for the orders-etl-pipeline task."""
import csv
import datetime as dt
import io
import random
import re

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def generate(seed: int) -> tuple[str, str]:
    r = random.Random(seed)
    c = io.StringIO()
    w = csv.writer(c, lineterminator="\n")
    w.writerow(["id", "name", "email", "country"])
    ids = r.sample(range(1, 500), 12)
    for i in ids:
        w.writerow([i, f"  {r.choice(['Ann', 'Bo', 'Cy', 'Di', 'Ed'])} {r.choice(['Lee', 'Ng', 'Roe'])} ",
                    f"User{i}@Example.COM ", r.choice(["de", "FR", " us", "US", "jp "])])
    o = io.StringIO()
    w = csv.writer(o, lineterminator="\n")
    w.writerow(["order_id", "customer_id", "order_date", "amount", "status"])
    rows = []
    for k in range(r.randint(30, 80)):
        d = dt.date(2024, 1, 1) + dt.timedelta(days=r.randint(0, 200))
        fmt = r.randrange(3)
        ds = d.isoformat() if fmt == 0 else f"{d.day:02d}/{d.month:02d}/{d.year}" if fmt == 1 \
            else f"{MONTHS[d.month - 1]} {d.day}, {d.year}"
        cents = r.randint(100, 300000)
        amt = f"${cents // 100:,}.{cents % 100:02d}" if r.random() < 0.5 else f"{cents / 100:.2f}"
        cust = r.choice(ids) if r.random() < 0.9 else 9999
        rows.append([1000 + k, cust, ds, amt, r.choice(["paid", "PAID", "refunded", "pending", " paid"])])
    for _ in range(5):  # re-sent rows: later occurrence wins
        x = list(r.choice(rows))
        x[4] = r.choice(["paid", "refunded"])
        rows.append(x)
    for x in rows:
        w.writerow(x)
    return c.getvalue(), o.getvalue()


def parse_date(s: str) -> str:
    s = s.strip()
    if re.fullmatch(r"\d{4}-\d\d-\d\d", s):
        return s
    m = re.fullmatch(r"(\d\d)/(\d\d)/(\d{4})", s)
    if m:
        return f"{m.group(3)}-{m.group(2)}-{m.group(1)}"
    m = re.fullmatch(r"([A-Za-z]+) (\d{1,2}), (\d{4})", s)
    assert m, s
    return f"{m.group(3)}-{MONTHS.index(m.group(1)) + 1:02d}-{int(m.group(2)):02d}"


def cents(s: str) -> int:
    s = s.strip().lstrip("$").replace(",", "")
    whole, _, frac = s.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def etl(customers_csv: str, orders_csv: str) -> tuple[list[tuple], list[tuple], dict]:
    cust = {}
    for r in csv.DictReader(io.StringIO(customers_csv)):
        cust[int(r["id"])] = (int(r["id"]), r["name"].strip(), r["email"].strip().lower(),
                              r["country"].strip().upper())
    orders: dict[int, tuple] = {}
    for r in csv.DictReader(io.StringIO(orders_csv)):
        cid = int(r["customer_id"])
        oid = int(r["order_id"])
        if cid not in cust:
            orders.pop(oid, None)
            continue
        orders[oid] = (oid, cid, parse_date(r["order_date"]), cents(r["amount"]),
                       r["status"].strip().lower())
    paid = [o for o in orders.values() if o[4] == "paid"]
    by_month: dict[str, int] = {}
    by_country: dict[str, int] = {}
    per_cust: dict[int, int] = {}
    for o in paid:
        by_month[o[2][:7]] = by_month.get(o[2][:7], 0) + 1
        ctry = cust[o[1]][3]
        by_country[ctry] = by_country.get(ctry, 0) + o[3]
        per_cust[o[1]] = per_cust.get(o[1], 0) + 1
    report = {
        "paid_orders": len(paid),
        "total_revenue_cents": sum(o[3] for o in paid),
        "orders_by_month": dict(sorted(by_month.items())),
        "top_country": min(by_country.items(), key=lambda kv: (-kv[1], kv[0]))[0] if by_country else None,
        "repeat_customers": sum(1 for v in per_cust.values() if v >= 2),
    }
    return sorted(cust.values()), sorted(orders.values()), report

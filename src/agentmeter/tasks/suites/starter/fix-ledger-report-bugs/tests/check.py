import csv
import io
import os
import random
import subprocess
import sys
import tempfile
from decimal import ROUND_HALF_UP, Decimal

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

RATES = {"EUR": Decimal("1"), "USD": Decimal("0.92"), "GBP": Decimal("1.17"), "JPY": Decimal("0.0061")}


def reference(text: str) -> str:
    rows = [ln for ln in text.splitlines(True) if ln.strip() and not ln.startswith("#")]
    tot: dict[str, Decimal] = {}
    for r in csv.DictReader(rows):
        amt = Decimal(r["amount"].strip().replace(",", ""))
        eur = (amt * RATES[r["currency"].strip().upper()]).quantize(Decimal("0.01"), ROUND_HALF_UP)
        tot[r["account"].strip()] = tot.get(r["account"].strip(), Decimal(0)) + eur
    return "".join(f"{a} {b.quantize(Decimal('0.01'))}\n" for a, b in sorted(tot.items()))


def generate(seed: int) -> str:
    r = random.Random(seed)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["date", "account", "amount", "currency"])
    for i in range(r.randint(5, 60)):
        amt = Decimal(r.randint(-500000, 900000)) / 100
        s = f"{amt:,.2f}" if r.random() < 0.5 else str(amt)
        w.writerow([f"2024-02-{i % 28 + 1:02d}", r.choice(["ops", "b", "Zeta", "aux", "rent"]), s,
                    r.choice(["EUR", "usd", "GBP", "JPY", "USD"])])
    return out.getvalue()


tmp = tempfile.mkdtemp()
texts = [open("/tests/transactions.csv").read()] + [generate(s) for s in range(8)]
for i, text in enumerate(texts):  # every input written before any agent code runs
    open(os.path.join(tmp, f"t{i}.csv"), "w").write(text)
subprocess.run([AS, "--own", tmp], check=True)
for i, text in enumerate(texts):
    p = os.path.join(tmp, f"t{i}.csv")
    r = subprocess.run([AS, sys.executable, "-m", "ledger", p], cwd="/app", capture_output=True,
                       text=True)
    if r.returncode != 0 or r.stdout != reference(text):
        sys.exit(f"file {i}: got\n{r.stdout}{r.stderr[-500:]}\nwant\n{reference(text)}")
code = """
import sys
sys.path.insert(0, "/app")
from ledger.parse import read_transactions
from ledger.report import balances, render
a = open(sys.argv[1]).read().splitlines(True)
first = render(balances(read_transactions(a)))
second = render(balances(read_transactions(a)))
assert first == second, "balances() keeps state between calls"
print(first, end="")
"""
r = subprocess.run([AS, sys.executable, "-c", code, os.path.join(tmp, "t1.csv")], cwd="/app",
                   capture_output=True, text=True)
if r.returncode != 0 or r.stdout != reference(texts[1]):
    sys.exit(f"library use failed: {r.stderr[-500:]}")
t = subprocess.run([AS, sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd="/app",
                   capture_output=True, text=True)
if t.returncode != 0:
    sys.exit(f"unit tests fail: {t.stderr[-800:]}")
print("ok")

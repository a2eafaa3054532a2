#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
def fix(path, old, new):
    s = open(path).read()
    assert old in s, (path, old)
    open(path, "w").write(s.replace(old, new))

# thousands separator is a comma: drop it (it is not a decimal comma)
fix("ledger/parse.py", 'Decimal(text.strip().replace(",", "."))', 'Decimal(text.strip().replace(",", ""))')
# RATES are EUR per unit: multiply
fix("ledger/fx.py", "return amount / rate", "return amount * rate")
# no shared mutable default
fix("ledger/report.py", "def balances(transactions, totals={}):\n",
    "def balances(transactions, totals=None):\n    totals = {} if totals is None else totals\n")
# sort by account name
fix("ledger/report.py", "sorted(totals.items(), key=lambda kv: kv[1])", "sorted(totals.items())")
PY
python3 -m unittest discover -s tests
python3 -m ledger transactions.csv

#!/bin/sh
# Builds the task's git history with fixed identities and dates (deterministic commit ids).
set -e
cd /app
git init -q -b main
git config user.name "Dana Dev"
git config user.email "dana@example.com"
n=0
c() { n=$((n+1)); d=$(printf '2024-02-%02dT09:00:00+00:00' $n); GIT_AUTHOR_DATE=$d GIT_COMMITTER_DATE=$d git commit -q -m "$1"; }
cat > invoice.py <<'PY'
def total(lines, tax_rate):
    subtotal = sum(qty * price for qty, price in lines)
    return int(subtotal * (1 + tax_rate) * 100) / 100


if __name__ == "__main__":
    print(total([(3, 19.99), (1, 5.01)], 0.2))
PY
cat > report.py <<'PY'
def number_lines(lines):
    return [f"{i}: {line}" for i, line in enumerate(lines)]


if __name__ == "__main__":
    print("\n".join(number_lines(["alpha", "beta"])))
PY
git add -A; c "Initial invoicing code"
printf '# invoicing\n\nSmall invoicing helpers.\n' > README.md
git add -A; c "Add README"
git checkout -q -b feature/export
cat > export.py <<'PY'
import csv
import sys


def export(rows, out=sys.stdout):
    csv.writer(out).writerows(rows)
PY
git add -A; c "Add CSV export"
sed -i 's/    return int(subtotal \* (1 + tax_rate) \* 100) \/ 100/    return round(subtotal * (1 + tax_rate), 2)/' invoice.py
git add -A; c "Fix rounding in invoice total"
printf '\n\nOPTIONS = {"delimiter": ";"}  # WIP\n' >> export.py
git add -A; c "WIP export options"
sed -i 's/enumerate(lines)\]/enumerate(lines, start=1)]/' report.py
git add -A; c "Fix line numbering in report"
printf '\n\ndef export_json(rows):\n    raise NotImplementedError\n' >> export.py
git add -A; c "Start JSON export"
git checkout -q main
printf '# invoicing\n\nSmall invoicing helpers.\n\nRun `python3 invoice.py`.\n' > README.md
git add -A; c "Document usage"
git log --all --format='%H %s' >&2

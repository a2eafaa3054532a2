"""Usage: python3 -m ledger FILE.csv"""
import sys

from ledger.parse import read_transactions
from ledger.report import balances, render

with open(sys.argv[1]) as f:
    sys.stdout.write(render(balances(read_transactions(f))))

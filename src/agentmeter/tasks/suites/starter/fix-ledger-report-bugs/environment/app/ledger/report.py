"""Balances per account (EUR), and their text rendering."""
from decimal import ROUND_HALF_UP, Decimal

from ledger.fx import to_eur


def cents(x):
    return x.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def balances(transactions, totals={}):
    for t in transactions:
        eur = cents(to_eur(t["amount"], t["currency"]))
        totals[t["account"]] = totals.get(t["account"], Decimal(0)) + eur
    return totals


def render(totals):
    """One line per account, ``ACCOUNT BALANCE`` with 2 decimals, sorted by account name."""
    lines = [f"{acct} {cents(bal)}" for acct, bal in sorted(totals.items(), key=lambda kv: kv[1])]
    return "\n".join(lines) + "\n"

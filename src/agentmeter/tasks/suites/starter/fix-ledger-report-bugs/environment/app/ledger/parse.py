"""Reading transactions.

File format: CSV with header ``date,account,amount,currency``. ``amount`` may use a comma
as thousands separator (then the field is quoted, e.g. ``"1,234.50"``) and may be negative.
Blank lines and lines starting with ``#`` are ignored.
"""
import csv
from decimal import Decimal


def parse_amount(text):
    return Decimal(text.strip().replace(",", "."))


def read_transactions(lines):
    rows = [line for line in lines if line.strip() and not line.startswith("#")]
    out = []
    for rec in csv.DictReader(rows):
        out.append({
            "date": rec["date"],
            "account": rec["account"].strip(),
            "amount": parse_amount(rec["amount"]),
            "currency": rec["currency"].strip().upper(),
        })
    return out

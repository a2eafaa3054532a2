import unittest
from decimal import Decimal

from ledger.parse import read_transactions
from ledger.report import balances, render

DATA = """date,account,amount,currency
2024-01-02,rent,-950.00,EUR
2024-01-03,salary,"2,500.00",USD
2024-01-05,food,-12.5,GBP
"""


class LedgerTest(unittest.TestCase):
    def test_report(self):
        totals = balances(read_transactions(DATA.splitlines(True)))
        self.assertEqual(totals["salary"], Decimal("2300.00"))
        self.assertEqual(render(totals), "food -14.63\nrent -950.00\nsalary 2300.00\n")


if __name__ == "__main__":
    unittest.main()

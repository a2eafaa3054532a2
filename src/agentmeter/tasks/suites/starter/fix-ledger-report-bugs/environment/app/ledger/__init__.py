"""ledger: balances per account from a CSV of transactions, in EUR."""

"""calc: a small arithmetic expression calculator."""

"""Turns source text into tokens: ("num", value) or ("op", char)."""
import re

TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))")


class CalcError(Exception):
    pass


def tokenize(text):
    tokens = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if m is None:
            break
        num, op = m.groups()
        if num is not None:
            tokens.append(("num", float(num) if "." in num else int(num)))
        elif op in "+-*/()":
            tokens.append(("op", op))
        else:
            raise CalcError(f"unexpected character {op!r}")
        pos = m.end()
    tokens.append(("end", None))
    return tokens

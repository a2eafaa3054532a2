"""Evaluates parser ASTs."""
from calc.tokenizer import CalcError


def evaluate(node):
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "neg":
        return -evaluate(node[1])
    left, right = evaluate(node[1]), evaluate(node[2])
    if kind == "+":
        return left + right
    if kind == "-":
        return left - right
    if kind == "*":
        return left * right
    if kind == "/":
        if right == 0:
            raise CalcError("division by zero")
        return left / right
    raise CalcError(f"unknown node {kind!r}")


def format_number(x):
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)

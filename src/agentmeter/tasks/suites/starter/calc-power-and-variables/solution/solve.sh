#!/bin/bash
set -euo pipefail
cd /app
cat > calc/tokenizer.py <<'PY'
"""Turns source text into tokens: ("num", value), ("name", str) or ("op", char)."""
import re

TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


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
        num, name, op = m.groups()
        if num is not None:
            tokens.append(("num", float(num) if "." in num else int(num)))
        elif name is not None:
            tokens.append(("name", name))
        elif op in "+-*/%^()=;":
            tokens.append(("op", op))
        else:
            raise CalcError(f"unexpected character {op!r}")
        pos = m.end()
    tokens.append(("end", None))
    return tokens
PY
cat > calc/parser.py <<'PY'
"""Recursive-descent parser producing nested tuples.

Grammar:
    program   := statement? (";" statement?)*
    statement := NAME "=" expr | expr
    expr      := term (("+" | "-") term)*
    term      := unary (("*" | "/" | "%") unary)*
    unary     := "-" unary | power
    power     := atom ("^" unary)?          (right-associative, tighter than unary minus)
    atom      := NUMBER | NAME | "(" expr ")"
AST nodes: ("program", [stmts]), ("assign", name, x), ("var", name), ("num", v),
("neg", x), (op, left, right).
"""
from calc.tokenizer import CalcError


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.i = 0

    def peek(self, k=0):
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, kind, value=None):
        tok = self.take()
        if tok[0] != kind or (value is not None and tok[1] != value):
            raise CalcError(f"expected {value or kind}, got {tok[1]!r}")
        return tok

    def parse(self):
        stmts = []
        while True:
            if self.peek() == ("op", ";"):
                self.take()
                continue
            if self.peek()[0] == "end":
                break
            stmts.append(self.statement())
            if self.peek()[0] != "end":
                self.expect("op", ";")
        if not stmts:
            raise CalcError("empty program")
        return ("program", stmts)

    def statement(self):
        if self.peek()[0] == "name" and self.peek(1) == ("op", "="):
            name = self.take()[1]
            self.take()
            return ("assign", name, self.expr())
        return self.expr()

    def expr(self):
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            node = (op, node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "%")):
            op = self.take()[1]
            node = (op, node, self.unary())
        return node

    def unary(self):
        if self.peek() == ("op", "-"):
            self.take()
            return ("neg", self.unary())
        return self.power()

    def power(self):
        node = self.atom()
        if self.peek() == ("op", "^"):
            self.take()
            return ("^", node, self.unary())
        return node

    def atom(self):
        tok = self.take()
        if tok[0] == "num":
            return ("num", tok[1])
        if tok[0] == "name":
            return ("var", tok[1])
        if tok == ("op", "("):
            node = self.expr()
            self.expect("op", ")")
            return node
        raise CalcError(f"unexpected token {tok[1]!r}")


def parse(tokens):
    return Parser(tokens).parse()
PY
cat > calc/evaluator.py <<'PY'
"""Evaluates parser ASTs."""
from calc.tokenizer import CalcError


def evaluate(node, env=None):
    env = {} if env is None else env
    kind = node[0]
    if kind == "program":
        value = None
        for stmt in node[1]:
            value = evaluate(stmt, env)
        return value
    if kind == "assign":
        env[node[1]] = evaluate(node[2], env)
        return env[node[1]]
    if kind == "var":
        if node[1] not in env:
            raise CalcError(f"unknown variable {node[1]}")
        return env[node[1]]
    if kind == "num":
        return node[1]
    if kind == "neg":
        return -evaluate(node[1], env)
    left, right = evaluate(node[1], env), evaluate(node[2], env)
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
    if kind == "%":
        if right == 0:
            raise CalcError("modulo by zero")
        return left % right
    if kind == "^":
        try:
            result = left ** right
        except (ZeroDivisionError, OverflowError) as e:
            raise CalcError(str(e)) from None
        if isinstance(result, complex):
            raise CalcError("complex result")
        return result
    raise CalcError(f"unknown node {kind!r}")


def format_number(x):
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)
PY
python3 -m calc 'x = 3; y = x ^ 2; y % 4 + x'

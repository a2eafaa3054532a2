"""Recursive-descent parser producing nested tuples.

Grammar:
    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := "-" unary | atom
    atom   := NUMBER | "(" expr ")"
AST nodes: ("num", v), ("neg", x), (op, left, right).
"""
from calc.tokenizer import CalcError


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.i = 0

    def peek(self):
        return self.tokens[self.i]

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
        node = self.expr()
        self.expect("end")
        return node

    def expr(self):
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            node = (op, node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            node = (op, node, self.unary())
        return node

    def unary(self):
        if self.peek() == ("op", "-"):
            self.take()
            return ("neg", self.unary())
        return self.atom()

    def atom(self):
        tok = self.take()
        if tok[0] == "num":
            return ("num", tok[1])
        if tok == ("op", "("):
            node = self.expr()
            self.expect("op", ")")
            return node
        raise CalcError(f"unexpected token {tok[1]!r}")


def parse(tokens):
    return Parser(tokens).parse()

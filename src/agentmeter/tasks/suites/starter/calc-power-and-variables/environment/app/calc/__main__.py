"""Usage: python3 -m calc 'EXPRESSION'  -> prints the value, or 'error: ...' (exit 1)."""
import sys

from calc.evaluator import evaluate, format_number
from calc.parser import parse
from calc.tokenizer import CalcError, tokenize


def main(argv):
    try:
        print(format_number(evaluate(parse(tokenize(argv[1])))))
    except CalcError as e:
        print(f"error: {e}")
        return 1
    return 0


sys.exit(main(sys.argv))

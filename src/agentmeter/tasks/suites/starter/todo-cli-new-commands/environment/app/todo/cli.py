"""Command line interface: python3 -m todo <command> ..."""
import argparse
import sys

from todo import store


def fmt(task):
    mark = "x" if task["done"] else " "
    return f"[{mark}] {task['id']} {task['text']}"


def cmd_add(data, args):
    task = store.add(data, " ".join(args.text))
    print(f"added {task['id']}")
    return 0


def cmd_list(data, args):
    for task in data["tasks"]:
        print(fmt(task))
    return 0


def cmd_done(data, args):
    task = store.find(data, args.id)
    if task is None:
        print(f"no such task: {args.id}", file=sys.stderr)
        return 2
    task["done"] = True
    print(f"done {task['id']}")
    return 0


def build_parser():
    p = argparse.ArgumentParser(prog="todo")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add")
    a.add_argument("text", nargs="+")
    a.set_defaults(func=cmd_add)
    ls = sub.add_parser("list")
    ls.set_defaults(func=cmd_list)
    d = sub.add_parser("done")
    d.add_argument("id", type=int)
    d.set_defaults(func=cmd_done)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    data = store.load()
    rc = args.func(data, args)
    if rc == 0:
        store.save(data)
    return rc

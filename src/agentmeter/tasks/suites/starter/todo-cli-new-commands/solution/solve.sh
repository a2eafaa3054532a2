#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
p = "todo/cli.py"
s = open(p).read()
s = s.replace('''def cmd_list(data, args):
    for task in data["tasks"]:
        print(fmt(task))
    return 0
''', '''def cmd_list(data, args):
    for task in data["tasks"]:
        if args.pending and task["done"]:
            continue
        print(fmt(task))
    return 0


def _missing(task_id):
    print(f"no such task: {task_id}", file=sys.stderr)
    return 2


def cmd_rm(data, args):
    task = store.find(data, args.id)
    if task is None:
        return _missing(args.id)
    data["tasks"].remove(task)
    print(f"removed {task['id']}")
    return 0


def cmd_edit(data, args):
    task = store.find(data, args.id)
    if task is None:
        return _missing(args.id)
    task["text"] = " ".join(args.text)
    print(f"edited {task['id']}")
    return 0


def cmd_undone(data, args):
    task = store.find(data, args.id)
    if task is None:
        return _missing(args.id)
    task["done"] = False
    print(f"undone {task['id']}")
    return 0
''')
s = s.replace('''    ls.set_defaults(func=cmd_list)
''', '''    ls.add_argument("--pending", action="store_true")
    ls.set_defaults(func=cmd_list)
    r = sub.add_parser("rm")
    r.add_argument("id", type=int)
    r.set_defaults(func=cmd_rm)
    e = sub.add_parser("edit")
    e.add_argument("id", type=int)
    e.add_argument("text", nargs="+")
    e.set_defaults(func=cmd_edit)
    u = sub.add_parser("undone")
    u.add_argument("id", type=int)
    u.set_defaults(func=cmd_undone)
''')
open(p, "w").write(s)
PY
python3 -m unittest discover -s tests

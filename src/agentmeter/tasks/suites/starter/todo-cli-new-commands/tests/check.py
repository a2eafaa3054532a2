import json
import os
import subprocess
import sys
import tempfile

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

tmp = tempfile.mkdtemp()
subprocess.run([AS, "--own", tmp], check=True)
env = dict(os.environ, TODO_FILE=os.path.join(tmp, "t.json"), PYTHONPATH="/app")


def run(*args: str) -> tuple[int, str, str]:
    r = subprocess.run([AS, sys.executable, "-m", "todo", *args], cwd="/app", env=env,
                       capture_output=True, text=True, timeout=20)
    return r.returncode, r.stdout, r.stderr


def expect(args: tuple[str, ...], rc: int, out: str, err: str | None = "") -> None:
    got = run(*args)
    if got[0] != rc or got[1] != out or (err is not None and got[2].strip() != err):
        sys.exit(f"todo {' '.join(args)}: got {got!r}, want rc={rc} out={out!r} err={err!r}")


expect(("add", "buy", "milk"), 0, "added 1\n")
expect(("add", "call", "mom"), 0, "added 2\n")
expect(("add", "write  report"), 0, "added 3\n")
expect(("done", "2"), 0, "done 2\n")
expect(("list",), 0, "[ ] 1 buy milk\n[x] 2 call mom\n[ ] 3 write  report\n")
expect(("list", "--pending"), 0, "[ ] 1 buy milk\n[ ] 3 write  report\n")
expect(("rm", "3"), 0, "removed 3\n")
expect(("add", "walk dog"), 0, "added 4\n")
expect(("rm", "3"), 2, "", "no such task: 3")
before = open(env["TODO_FILE"]).read()
expect(("edit", "9", "x"), 2, "", "no such task: 9")
expect(("undone", "77"), 2, "", "no such task: 77")
expect(("done", "99"), 2, "", "no such task: 99")
if open(env["TODO_FILE"]).read() != before:
    sys.exit("failed command changed the store")
expect(("edit", "2", "call", "dad", "today"), 0, "edited 2\n")
expect(("list",), 0, "[ ] 1 buy milk\n[x] 2 call dad today\n[ ] 4 walk dog\n")
expect(("undone", "2"), 0, "undone 2\n")
expect(("list", "--pending"), 0, "[ ] 1 buy milk\n[ ] 2 call dad today\n[ ] 4 walk dog\n")
expect(("rm", "1"), 0, "removed 1\n")
expect(("rm", "4"), 0, "removed 4\n")
expect(("add", "last"), 0, "added 5\n")
expect(("done", "5"), 0, "done 5\n")
expect(("list", "--pending"), 0, "[ ] 2 call dad today\n")
expect(("list",), 0, "[ ] 2 call dad today\n[x] 5 last\n")
data = json.load(open(env["TODO_FILE"]))
if [t["id"] for t in data["tasks"]] != [2, 5]:
    sys.exit(f"bad store {data}")
os.remove(env["TODO_FILE"])
expect(("list", "--pending"), 0, "")
r = subprocess.run([AS, sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd="/app",
                   capture_output=True, text=True, timeout=60)
if r.returncode != 0:
    sys.exit(f"existing tests fail:\n{r.stderr}")
print("ok")

import os
import re
import subprocess
import sys

sys.path.insert(0, "/tests")
from safegit import git as _git  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

TIP = "e11b51f27ac937d94cfc303d1d600490c80d62c7"
BAD = "c5422e07f118846a68ea6c461b6d24c75c9bf84c"


def git(*args: str) -> str:
    return _git(*args)


try:
    if open("/app/first_bad.txt").read().strip() != BAD:
        sys.exit("first_bad.txt is wrong")
except OSError:
    sys.exit("first_bad.txt missing")
try:
    if git("rev-parse", "main~1").strip() != TIP:
        sys.exit("main~1 is not the original tip")
    if git("log", "-1", "--format=%s", "main").strip() != 'Revert "Tidy word helpers"':
        sys.exit("bad revert subject")
    if git("diff", "--name-only", "main~1", "main").split() != ["textstats.py"]:
        sys.exit("revert commit must change only textstats.py")
    if git("symbolic-ref", "--short", "HEAD").strip() != "main":
        sys.exit("main not checked out")
    if git("status", "--porcelain", "--untracked-files=no"):
        sys.exit("uncommitted changes")
    if "first_bad.txt" in git("ls-tree", "-r", "--name-only", "main").split():
        sys.exit("first_bad.txt was committed")
    old = git("show", f"{TIP}:textstats.py").split("\n")
    new = git("show", "main:textstats.py").split("\n")
except subprocess.CalledProcessError as e:
    sys.exit(f"git failed: {e.cmd}: {e.stderr}")
if len(old) != len(new):
    sys.exit("textstats.py: lines were added or removed")
diff = [(a, b) for a, b in zip(old, new) if a != b]
if len(diff) != 1 or diff[0][0] != '    return text.split(" ")  # split on spaces' \
        or not re.fullmatch(r"    return text\.split\(\)\s*# split on spaces", diff[0][1]):
    sys.exit(f"unexpected change: {diff}")
r = subprocess.run([AS, "sh", "./check.sh"], cwd="/app", capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"check.sh fails: {r.stderr}")
print("ok")

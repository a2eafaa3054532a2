import os
import subprocess
import sys

sys.path.insert(0, "/tests")
from safegit import git as _git  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user


def git(*args: str) -> str:
    return _git(*args).strip()


try:
    if git("rev-parse", "feature/export") != "c0342e2b53782bf840565c4b5d727728a46f90fc":
        sys.exit("feature/export was changed")
    if git("rev-parse", "main~2") != "7b10f2376b209c78d091731c77dda22e8eebb755":
        sys.exit("main~2 is not the original main tip")
    subj = git("log", "--format=%s", "main~2..main").splitlines()
    if subj != ["Fix line numbering in report", "Fix rounding in invoice total"]:
        sys.exit(f"new commits on main: {subj}")
    if git("diff", "--name-only", "main~2", "main~1") != "invoice.py":
        sys.exit("first new commit must change only invoice.py")
    if git("diff", "--name-only", "main~1", "main") != "report.py":
        sys.exit("second new commit must change only report.py")
    if git("ls-tree", "--name-only", "main").split() != ["README.md", "invoice.py", "report.py"]:
        sys.exit("unexpected files on main")
    if git("show", "main:README.md") != git("show", "7b10f23:README.md"):
        sys.exit("README changed")
    for f in ("invoice.py", "report.py"):
        if git("show", f"main:{f}") != git("show", f"feature/export:{f}"):
            sys.exit(f"{f} on main differs from the fixed version")
    if git("symbolic-ref", "--short", "HEAD") != "main" or git("status", "--porcelain"):
        sys.exit("main not checked out or working tree not clean")
except subprocess.CalledProcessError as e:
    sys.exit(f"git failed: {e.cmd} {e.stderr}")
out = subprocess.run([AS, sys.executable, "/app/invoice.py"], cwd="/app", capture_output=True, text=True).stdout
if out.strip() != "77.98":
    sys.exit(f"invoice.py prints {out!r}")
print("ok")

import subprocess
import sys

sys.path.insert(0, "/tests")
from safegit import git  # noqa: E402,F401


try:
    subjects = git("log", "--format=%s", "main").splitlines()
    want = ["Restore config.ini", "Add README", "Allow config path argument",
            "Tune server settings", "Initial app"]
    if subjects != want:
        sys.exit(f"history {subjects}")
    if git("rev-parse", "main~1").strip() != "fb976c5ddbee1840d6b942f27000ae0ec1ce3cda":
        sys.exit("existing history was rewritten")
    if git("rev-parse", "HEAD").strip() != git("rev-parse", "main").strip():
        sys.exit("HEAD is not main")
    if git("diff", "--name-status", "main~1", "main").split() != ["A", "config.ini"]:
        sys.exit("commit changes more than config.ini")
    if git("show", "main:config.ini") != git("show", "main~3:config.ini"):
        sys.exit("wrong content in commit")
    if open("/app/config.ini").read() != git("show", "main~3:config.ini"):
        sys.exit("wrong content in working tree")
    if git("status", "--porcelain"):
        sys.exit("working tree not clean")
except subprocess.CalledProcessError as e:
    sys.exit(f"git failed: {e} {e.stderr}")
print("ok")

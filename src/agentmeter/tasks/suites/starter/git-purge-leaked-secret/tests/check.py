import json
import subprocess
import sys

sys.path.insert(0, "/tests")
from safegit import git, run  # noqa: E402

expected = json.load(open("/tests/expected_history.json"))
SECRETS = [b"sk-live-9f8e7d6c5b4a", b"hunter2", b"hunter3"]

try:
    refs = sorted(git("for-each-ref", "--format=%(refname)").split())
    if refs != ["refs/heads/main", "refs/tags/v1.0"]:
        sys.exit(f"unexpected refs {refs}")
    log = git("log", "--reverse", "--format=%H%x09%s%x09%an%x09%ae%x09%aI", "main").splitlines()
    if len(log) != len(expected):
        sys.exit(f"{len(log)} commits, want {len(expected)}")
    for line, want in zip(log, expected):
        h, s, an, ae, ad = line.split("\t")
        if [s, an, ae, ad] != [want["subject"], want["author"], want["email"], want["date"]]:
            sys.exit(f"commit metadata changed: {line}")
        paths = git("ls-tree", "-r", "--name-only", h).split()
        if sorted(paths) != sorted(want["files"]):
            sys.exit(f"{s}: files {paths}, want {sorted(want['files'])}")
        for p, content in want["files"].items():
            if git("show", f"{h}:{p}") != content:
                sys.exit(f"{s}: content of {p} differs")
    tagged = git("rev-parse", "v1.0^{commit}").strip()
    if git("log", "-1", "--format=%s", tagged).strip() != "Rotate DB password, document deploy" \
            or git("merge-base", "--is-ancestor", tagged, "main") != "":
        sys.exit("v1.0 does not point to the rewritten commit")
    if git("symbolic-ref", "--short", "HEAD").strip() != "main" or git("status", "--porcelain"):
        sys.exit("main not checked out or tree not clean")
except subprocess.CalledProcessError as e:
    sys.exit(f"git failed: {e.cmd}: {e.stderr}")
dump = run("cat-file", "--batch-all-objects", "--batch", text=False).stdout
raw = subprocess.run(["grep", "-rlaF", "-e", "sk-live-9f8e7d6c5b4a", "-e", "hunter2", "-e", "hunter3",
                      "/app/.git"], capture_output=True, text=True).stdout
for s in SECRETS:
    if s in dump:
        sys.exit(f"secret {s!r} still in a stored object")
if raw.strip():
    sys.exit(f"secret still present in {raw.split()}")
print("ok")

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, "/tests")
from tocref import generate, toc  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

if not os.access("/app/mdtoc", os.X_OK):
    sys.exit("/app/mdtoc missing or not executable")
tmp = tempfile.mkdtemp()
docs = [open("/tests/README.md").read()] + [generate(s) for s in range(15)]
docs.append("no headings here\n")
for i, doc in enumerate(docs):  # every input written before any agent code runs
    open(os.path.join(tmp, f"d{i}.md"), "w").write(doc)
subprocess.run([AS, "--own", tmp], check=True)
for i, doc in enumerate(docs):
    p = os.path.join(tmp, f"d{i}.md")
    r = subprocess.run([AS, "/app/mdtoc", p], capture_output=True, text=True, timeout=20)
    want = toc(doc)
    if r.returncode != 0 or r.stdout.strip("\n") != want.strip("\n"):
        sys.exit(f"doc {i}:\n{doc}\n--- got:\n{r.stdout}{r.stderr[-400:]}\n--- want:\n{want}")
print("ok")

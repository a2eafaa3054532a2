import os
import subprocess
import sys
import tempfile

sys.path.insert(0, "/tests")
from logref import generate, summarize  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

if not os.access("/app/logsummary", os.X_OK):
    sys.exit("/app/logsummary missing or not executable")
tmp = tempfile.mkdtemp()
inputs = [open("/app/access.log").read()] + [generate(s, n) for s, n in ((7, 500), (12, 80), (5, 1000))]
inputs.append('1.1.1.1 - - [x] "GET /a?b=c HTTP/1.0" 503 - "-" "-"\n\n2.2.2.2 - - [x] "GET /a HTTP/1.0" 200 10 "-" "-"\nnope\n')
for i, text in enumerate(inputs):  # every input written before any agent code runs
    open(os.path.join(tmp, f"log{i}.log"), "w").write(text)
subprocess.run([AS, "--own", tmp], check=True)
for i, text in enumerate(inputs):
    p = os.path.join(tmp, f"log{i}.log")
    r = subprocess.run([AS, "/app/logsummary", p], capture_output=True, text=True, timeout=30)
    want = summarize(text)
    if r.returncode != 0 or r.stdout.strip("\n") != want.strip("\n"):
        sys.exit(f"log {i}: rc={r.returncode}\n got:\n{r.stdout}{r.stderr}\n want:\n{want}")
print("ok")

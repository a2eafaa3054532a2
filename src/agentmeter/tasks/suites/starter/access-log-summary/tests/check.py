import os
import subprocess
import sys
import tempfile

sys.path.insert(0, "/tests")
from logref import generate, summarize  # noqa: E402

if not os.access("/app/logsummary", os.X_OK):
    sys.exit("/app/logsummary missing or not executable")
tmp = tempfile.mkdtemp()
inputs = [open("/app/access.log").read()] + [generate(s, n) for s, n in ((7, 500), (12, 80), (5, 1000))]
inputs.append('1.1.1.1 - - [x] "GET /a?b=c HTTP/1.0" 503 - "-" "-"\n\n2.2.2.2 - - [x] "GET /a HTTP/1.0" 200 10 "-" "-"\nnope\n')
for i, text in enumerate(inputs):
    p = os.path.join(tmp, f"log{i}.log")
    open(p, "w").write(text)
    r = subprocess.run(["/app/logsummary", p], capture_output=True, text=True, timeout=30)
    want = summarize(text)
    if r.returncode != 0 or r.stdout.strip("\n") != want.strip("\n"):
        sys.exit(f"log {i}: rc={r.returncode}\n got:\n{r.stdout}{r.stderr}\n want:\n{want}")
print("ok")

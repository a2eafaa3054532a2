import os
import subprocess
import sys
import tempfile

sys.path.insert(0, "/tests")
from sessref import generate, sessionize  # noqa: E402

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

if not os.access("/app/sessionize", os.X_OK):
    sys.exit("/app/sessionize missing or not executable")
tmp = tempfile.mkdtemp()
texts = [open("/tests/events.jsonl").read()] + [generate(s, n) for s, n in ((2, 300), (9, 40), (4, 700))]
texts.append('{"user": "a", "ts": "2024-01-01T00:00:00Z"}\n{"user": "a", "ts": "2024-01-01T00:30:00Z"}\n'
             '{"user": "a", "ts": "2024-01-01T01:00:01Z"}\n{"user": 5, "ts": "2024-01-01T00:00:00Z"}\n'
             '{"user": "b", "ts": "2024-01-01 00:00:00"}\n')
for i, text in enumerate(texts):  # every input written before any agent code runs
    open(os.path.join(tmp, f"e{i}.jsonl"), "w").write(text)
subprocess.run([AS, "--own", tmp], check=True)
for i, text in enumerate(texts):
    p = os.path.join(tmp, f"e{i}.jsonl")
    r = subprocess.run([AS, "/app/sessionize", p], capture_output=True, text=True, timeout=30)
    want = sessionize(text)
    if r.returncode != 0 or r.stdout.replace("\r\n", "\n").strip("\n") != want.strip("\n"):
        sys.exit(f"file {i}: rc={r.returncode}\n got:\n{r.stdout[:1500]}{r.stderr[-500:]}\n want:\n{want[:1500]}")
print("ok")

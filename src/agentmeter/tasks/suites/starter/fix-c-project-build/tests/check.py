import collections
import hashlib
import os
import re
import subprocess
import sys

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user
src = {}
for d in ("src", "include"):
    for f in sorted(os.listdir(f"/app/{d}")):
        src[f"{d}/{f}"] = hashlib.sha256(open(f"/app/{d}/{f}", "rb").read()).hexdigest()
if src != {k: v for k, v in (line.split() for line in open("/tests/sources.sha256"))}:
    sys.exit("sources were changed")
subprocess.run([AS, "make", "-C", "/app", "clean"], capture_output=True)
subprocess.run([AS, "rm", "-rf", "/app/bin", "/app/build"])
b = subprocess.run([AS, "make", "-C", "/app"], capture_output=True, text=True)
if b.returncode != 0 or not os.access("/app/bin/wordfreq", os.X_OK):
    sys.exit(f"build failed:\n{b.stdout}\n{b.stderr}")
again = subprocess.run([AS, "make", "-C", "/app"], capture_output=True, text=True)
if again.returncode != 0 or "gcc" in again.stdout:
    sys.exit(f"second make rebuilt something:\n{again.stdout}")
texts = ["The cat and the hat. THE end, and fin!",
         "b a c b a b\nz z z z", "one", "",
         "It was the best of times, it was the worst of times; it was the age of wisdom."]
for text in texts:
    for n in (None, "1", "5"):
        words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
        cnt = sorted(collections.Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))
        want = "".join(f"{c} {w}\n" for w, c in cnt[: int(n or 3)])
        r = subprocess.run([AS, "/app/bin/wordfreq"] + ([n] if n else []), input=text,
                           capture_output=True, text=True, timeout=10)
        if r.returncode != 0 or r.stdout != want:
            sys.exit(f"wordfreq {n} on {text!r}: got {r.stdout!r}, want {want!r}")
print("ok")

import os
import subprocess
import sys
import time

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user


def make() -> subprocess.CompletedProcess[str]:
    return subprocess.run([AS, "make", "-C", "/app"], capture_output=True, text=True, timeout=120)


subprocess.run([AS, "make", "-C", "/app", "clean"], capture_output=True)
subprocess.run([AS, "rm", "-rf", "/app/build", "/app/rpn"])
b = make()
if b.returncode != 0 or not os.access("/app/rpn", os.X_OK):
    sys.exit(f"clean build failed:\n{b.stdout}\n{b.stderr}")
flags = subprocess.run([AS, "make", "-C", "/app", "-pn"], capture_output=True, text=True).stdout
if not all(f in flags for f in ("-O2", "-Wall", "-Werror")):
    sys.exit("required CFLAGS missing")
cases = [("3 4 + 2 x", "14"), ("2 10 ^", "1024"), ("2 sqrt", "1.414213562"), ("1 3 /", "0.3333333333"),
         ("5 1 2 + 4 x + 3 -", "14"), ("0.5 -2 ^", "4"), ("9 sqrt sqrt 3 ^", "5.196152423"),
         ("1e3 7 -", "993"), ("-4 sqrt", None), ("1 0 /", None), ("1 +", None), ("1 2", None),
         ("2 3 y", None), ("", None), ("2 3 *", None)]
for expr, want in cases:
    r = subprocess.run([AS, "/app/rpn", *expr.split()], capture_output=True, text=True, timeout=10)
    if want is None:
        if r.returncode != 1 or r.stdout or not r.stderr:
            sys.exit(f"rpn {expr!r}: want error exit 1, got rc={r.returncode} out={r.stdout!r}")
    elif r.returncode != 0 or r.stdout.strip() != want:
        sys.exit(f"rpn {expr!r}: got rc={r.returncode} {r.stdout!r}, want {want!r}")
again = make()
if again.returncode != 0 or "gcc" in again.stdout:
    sys.exit(f"no-op make rebuilt:\n{again.stdout}")


def compiled(out: str) -> set[str]:
    return {os.path.basename(t).split(".")[0] for line in out.splitlines() if " -c " in line
            for t in line.split() if t.endswith(".c")}


for header, want in (("stack.h", {"stack", "ops", "main"}), ("ops.h", {"ops", "main"})):
    time.sleep(1.1)
    p = f"/app/include/{header}"
    # appended as the agent: root never writes through a path the agent controls
    subprocess.run([AS, "sh", "-c", 'printf "\\n/* touched by the verifier */\\n" >> "$1"', "sh", p],
                   check=True)
    r = make()
    got = compiled(r.stdout)
    if r.returncode != 0 or not want <= got or "-o rpn" not in r.stdout.replace("-o /app/rpn", "-o rpn"):
        sys.exit(f"after changing {header}: recompiled {sorted(got)}, want at least {sorted(want)}:\n{r.stdout}")
print("ok")

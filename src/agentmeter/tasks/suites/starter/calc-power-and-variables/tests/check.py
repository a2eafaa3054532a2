import os
import subprocess
import sys

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user

OK = [
    ("1 + 2 * 3", "7"), ("-(2+3)*4/8", "-2.5"), ("2^3^2", "512"), ("-2^2", "-4"), ("(-2)^2", "4"),
    ("2^-1", "0.5"), ("2 * 3 ^ 2", "18"), ("2^3*2", "16"), ("-7 % 3", "2"), ("7 % -3", "-2"),
    ("10 % 4 * 3", "6"), ("2 * 10 % 4", "0"), ("8 / 2 % 3", "1"), ("5.5 % 2", "1.5"),
    ("x = 3; y = x ^ 2; y % 4 + x", "4"), ("a = 2; a = a * a; a", "4"), ("r = 5 % 3", "2"),
    ("long_name_1 = 10; _t = long_name_1 / 4; _t", "2.5"), ("x = 2;", "2"), (";; 4 ;", "4"),
    ("a=1;b=a+1;c=b^b^a;c", "4"), ("x = -2 ^ 2; -x", "4"), ("4 ^ 0.5", "2"), ("1.5 + .5", "2"),
    ("v = 2; (v + 1) ^ -v", "0.1111111111111111"), ("x=1; x=x+1; x=x+1; x*x", "9"),
]
ERR = ["x + 1", "1 % 0", "1 / 0", "", ";", "x = ", "= 3", "3 = x", "2 ^", "a = 1; b", "(1 + 2",
       "1 +* 2", "2 $ 3", "a b = 1", "1 2"]
for src, want in OK:
    r = subprocess.run([AS, sys.executable, "-m", "calc", src], cwd="/app", capture_output=True,
                       text=True, timeout=10)
    if r.returncode != 0 or r.stdout.strip() != want:
        sys.exit(f"calc {src!r}: rc={r.returncode} out={r.stdout!r} err={r.stderr[-300:]!r}, want {want!r}")
for src in ERR:
    r = subprocess.run([AS, sys.executable, "-m", "calc", src], cwd="/app", capture_output=True,
                       text=True, timeout=10)
    if r.returncode != 1 or not r.stdout.startswith("error:") or "Traceback" in r.stderr:
        sys.exit(f"calc {src!r}: want an 'error:' line and exit 1, got rc={r.returncode} {r.stdout!r} {r.stderr[-300:]!r}")
print(f"ok ({len(OK) + len(ERR)} cases)")

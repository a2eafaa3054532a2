import hashlib
import json
import os
import sys

files: dict[str, str] = json.load(open("/tests/expected_hashes.json"))


def ext_of(name: str) -> str:
    stem = name[1:] if name.startswith(".") else name
    return stem.rsplit(".", 1)[1].lower() if "." in stem else "noext"


if not os.path.isdir("/app/inbox") or os.listdir("/app/inbox"):
    sys.exit("inbox missing or not empty")
want = {f"{ext_of(n)}/{n}": h for n, h in files.items()}
got = {}
for dirpath, dirnames, filenames in os.walk("/app/sorted"):
    rel = os.path.relpath(dirpath, "/app/sorted")
    if rel != "." and "/" in rel:
        sys.exit(f"nested directory {rel}")
    if rel == "." and filenames:
        sys.exit(f"files directly in sorted/: {filenames}")
    for n in filenames:
        p = os.path.join(dirpath, n)
        got[f"{rel}/{n}"] = hashlib.sha256(open(p, "rb").read()).hexdigest()
if got != want:
    sys.exit(f"mismatch:\n got  {sorted(got)}\n want {sorted(want)}")
print("ok")

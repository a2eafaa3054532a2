import hashlib
import json
import os
import sys
import tarfile

allf: dict[str, str] = json.load(open("/tests/all_files.json"))


def excluded(rel: str) -> bool:
    parts = rel.split("/")
    return parts[-1].endswith(".log") or any(p in ("node_modules", ".cache") for p in parts[:-1])


want = {k: v for k, v in allf.items() if not excluded(k)}
for rel, h in allf.items():
    p = os.path.join("/app", rel)
    if not os.path.isfile(p) or hashlib.sha256(open(p, "rb").read()).hexdigest() != h:
        sys.exit(f"project modified: {rel}")
try:
    tf = tarfile.open("/app/backup.tar.gz", "r:gz")
    got = {}
    for m in tf.getmembers():
        name = m.name[2:] if m.name.startswith("./") else m.name
        if not name.startswith("project"):
            sys.exit(f"entry outside project/: {m.name}")
        if any(p in ("node_modules", ".cache") for p in name.split("/")):
            sys.exit(f"excluded entry present: {m.name}")
        if m.isfile():
            f = tf.extractfile(m)
            assert f is not None
            got[name] = hashlib.sha256(f.read()).hexdigest()
except (OSError, tarfile.TarError) as e:
    sys.exit(f"bad archive: {e}")
if got != want:
    sys.exit(f"mismatch: missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}, "
             f"changed {sorted(k for k in got if k in want and got[k] != want[k])}")
print("ok")

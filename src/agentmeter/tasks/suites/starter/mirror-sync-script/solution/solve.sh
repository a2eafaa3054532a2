#!/bin/bash
set -euo pipefail
cd /app
cat > mirror <<'PY'
#!/usr/bin/env python3
import os
import shutil
import stat
import sys


def kind(p):
    try:
        m = os.lstat(p).st_mode
    except OSError:
        return None
    return "link" if stat.S_ISLNK(m) else "dir" if stat.S_ISDIR(m) else "file"


def walk(root):
    out = []
    if not os.path.isdir(root):
        return out
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            out.append(os.path.relpath(os.path.join(dp, n), root))
    return out


src, dst = sys.argv[1], sys.argv[2]
events = []  # (path bytes, order, line)
os.makedirs(dst, exist_ok=True)


def remove(rel):
    p = os.path.join(dst, rel)
    if kind(p) == "dir":
        for sub in walk(p):
            events.append((os.fsencode(os.path.join(rel, sub)), 0, f"DELETE {os.path.join(rel, sub)}"))
        shutil.rmtree(p)
    else:
        os.unlink(p)
    events.append((os.fsencode(rel), 0, f"DELETE {rel}"))


# deletions first (deepest first), including type changes
for rel in sorted(walk(dst), key=lambda r: -r.count("/")):
    d = os.path.join(dst, rel)
    if kind(d) is None:
        continue  # already removed with its parent
    if kind(os.path.join(src, rel)) != kind(d):
        remove(rel)

for rel in sorted(walk(src)):
    s, d = os.path.join(src, rel), os.path.join(dst, rel)
    ks, kd = kind(s), kind(d)
    if ks == "dir":
        if kd is None:
            os.mkdir(d)
            events.append((os.fsencode(rel), 1, f"ADD {rel}"))
        continue
    if ks == "link":
        target = os.readlink(s)
        if kd == "link" and os.readlink(d) == target:
            continue
        if kd is not None:
            os.unlink(d)
        os.symlink(target, d)
    else:
        with open(s, "rb") as f:
            data = f.read()
        mode = stat.S_IMODE(os.lstat(s).st_mode)
        if kd == "file":
            with open(d, "rb") as f:
                same = f.read() == data
            if same and stat.S_IMODE(os.lstat(d).st_mode) == mode:
                continue
        with open(d, "wb") as f:
            f.write(data)
        os.chmod(d, mode)
    events.append((os.fsencode(rel), 1, f"{'UPDATE' if kd is not None else 'ADD'} {rel}"))

for _, _, line in sorted(events):
    print(line)
PY
chmod +x mirror
mkdir -p /tmp/m/src/d && echo hi > /tmp/m/src/d/f && ln -s d/f /tmp/m/src/l
./mirror /tmp/m/src /tmp/m/dst && ./mirror /tmp/m/src /tmp/m/dst

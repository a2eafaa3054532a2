#!/bin/bash
set -euo pipefail
cd /app
cat > mdtoc <<'PY'
#!/usr/bin/env python3
import re
import sys

ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def slugify(text):
    s = re.sub(r"[^a-z0-9 _-]", "", text.lower().replace("`", ""))
    return s.replace(" ", "-")


used = set()
fence = None
with open(sys.argv[1], encoding="utf-8") as f:
    lines = f.read().split("\n")
for line in lines:
    m = FENCE.match(line)
    if fence is None:
        if m:
            fence = m.group(1)
            continue
    else:
        run = m.group(1) if m else ""
        if m and run[0] == fence[0] and len(run) >= len(fence) and line.strip() == run:
            fence = None
        continue
    h = ATX.match(line)
    if not h:
        continue
    level = len(h.group(1))
    text = (h.group(2) or "").strip()
    text = re.sub(r"(^|[ \t]+)#+$", "", text).strip()
    if not text:
        continue
    base = slug = slugify(text)
    n = 0
    while slug in used:
        n += 1
        slug = f"{base}-{n}"
    used.add(slug)
    if 2 <= level <= 4:
        print(f"{'  ' * (level - 2)}- [{text}](#{slug})")
PY
chmod +x mdtoc
./mdtoc README.md

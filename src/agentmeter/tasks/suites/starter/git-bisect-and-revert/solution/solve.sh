#!/bin/bash
set -euo pipefail
cd /app
first=$(git rev-list --max-parents=0 main)
git bisect start main "$first" >/dev/null
git bisect run ./check.sh > /tmp/bisect.log 2>&1 || true
bad=$(git rev-parse refs/bisect/bad)
git bisect reset >/dev/null 2>&1
git checkout -q main
echo "$bad" > first_bad.txt
subject=$(git log -1 --format=%s "$bad")
if ! git revert --no-edit "$bad"; then
    # keep the later comment, undo only the tokenizer change
    python3 - <<'PY'
import re
p = "textstats.py"
s = open(p).read()
s = re.sub(r'<<<<<<< [^\n]*\n    return text\.split\(" "\)  # split on spaces\n=======\n    return text\.split\(\)\n>>>>>>> [^\n]*\n',
           '    return text.split()  # split on spaces\n', s)
assert "<<<<<<<" not in s
open(p, "w").write(s)
PY
    git add textstats.py
    GIT_EDITOR=true git revert --continue
fi
./check.sh && echo "check passes; reverted $bad ($subject)"
git log --oneline -3

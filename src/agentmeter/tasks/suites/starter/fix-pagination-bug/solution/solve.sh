#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
p = "paginate.py"
s = open(p).read()
s = s.replace("total_pages = max(1, len(items) // per_page)",
              "total_pages = max(1, -(-len(items) // per_page))")
s = s.replace("start = page * per_page", "start = (page - 1) * per_page")
open(p, "w").write(s)
PY
python3 -c 'from paginate import paginate; print(paginate(list(range(25)), 3))'

import json
import math
import os
import subprocess
import sys

AS = os.environ["AS_AGENT"]  # runs agent-written code as the unprivileged agent user
#: run as the agent: the agent's module is never imported into this (root) process
RUNNER = """
import json, sys
sys.path.insert(0, "/app")
from paginate import paginate
out = []
for n, page, per in json.load(sys.stdin):
    items = list(range(100, 100 + n))
    try:
        out.append({"got": paginate(items, page, per) if per is not None else paginate(items, page)})
    except ValueError:
        out.append({"got": None})
    except Exception as e:
        out.append({"error": repr(e)})
print()
print(json.dumps(out))
"""


def ref(items: list[int], page: int, per_page: int) -> dict[str, object] | None:
    if per_page < 1:
        return None
    total = max(1, math.ceil(len(items) / per_page))
    if page < 1 or page > total:
        return None
    s = (page - 1) * per_page
    return {"items": items[s:s + per_page], "page": page, "total_pages": total,
            "has_next": page < total}


cases = []
for n in (0, 1, 9, 10, 11, 25, 30, 31):
    for per in (0, 1, 3, 10, 50):
        for page in (-1, 0, 1, 2, 3, 4, 8, 11, 31, 32):
            cases.append((n, page, per))
default = (25, 3, None)  # paginate(range(25), 3): the default per_page
r = subprocess.run([AS, sys.executable, "-c", RUNNER], cwd="/app", input=json.dumps(cases + [default]),
                   capture_output=True, text=True, timeout=60)
try:
    results = json.loads(r.stdout.strip().rsplit("\n", 1)[-1])
    assert isinstance(results, list) and len(results) == len(cases) + 1
except (ValueError, AssertionError, IndexError):
    sys.exit(f"paginate could not be run: rc={r.returncode} {r.stderr[-800:]}")
for (n, page, per), res in zip(cases, results):
    items = list(range(100, 100 + n))
    want = ref(items, page, per)
    if not isinstance(res, dict) or "error" in res:
        sys.exit(f"paginate({n} items, {page}, {per}) raised {res}")
    if res.get("got") != want:
        sys.exit(f"paginate({n} items, page={page}, per_page={per}) = {res.get('got')!r}, want {want!r}")
last = results[-1]
if not isinstance(last, dict) or not isinstance(last.get("got"), dict) \
        or last["got"].get("items") != [120, 121, 122, 123, 124]:
    sys.exit("default per_page broken")
print(f"ok ({len(cases)} cases)")

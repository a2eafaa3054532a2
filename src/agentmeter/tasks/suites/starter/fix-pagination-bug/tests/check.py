import math
import sys

sys.path.insert(0, "/app")
try:
    from paginate import paginate
except Exception as e:  # noqa: BLE001
    sys.exit(f"import failed: {e}")


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
for n, page, per in cases:
    items = list(range(100, 100 + n))
    want = ref(items, page, per)
    try:
        got = paginate(items, page, per)
    except ValueError:
        got = None
    except Exception as e:  # noqa: BLE001
        sys.exit(f"paginate({n} items, {page}, {per}) raised {e!r}")
    if got != want:
        sys.exit(f"paginate({n} items, page={page}, per_page={per}) = {got!r}, want {want!r}")
if paginate(list(range(25)), 3)["items"] != [20, 21, 22, 23, 24]:
    sys.exit("default per_page broken")
print(f"ok ({len(cases)} cases)")

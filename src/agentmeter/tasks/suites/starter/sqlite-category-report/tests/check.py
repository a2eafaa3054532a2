import os
import sqlite3
import sys
import tempfile

sys.path.insert(0, "/tests")
from mkdb import make  # noqa: E402

REF = """SELECT c.name, COUNT(*), ROUND(AVG(p.price), 2) FROM products p
JOIN categories c ON c.id = p.category_id WHERE p.discontinued = 0
GROUP BY c.id ORDER BY COUNT(*) DESC, c.name ASC"""
try:
    sql = open("/app/report.sql").read()
except OSError as e:
    sys.exit(f"no report.sql: {e}")
tmp = tempfile.mkdtemp()
dbs = ["/app/shop.db"]
for seed in (2, 3, 4):
    p = os.path.join(tmp, f"{seed}.db")
    make(p, seed)
    dbs.append(p)
#: the agent's SQL may only read: no ATTACH (which creates files), no PRAGMA, no writes
READ_ONLY = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
             sqlite3.SQLITE_RECURSIVE}
for path in dbs:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = db.execute(REF).fetchall()
    db.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in READ_ONLY else sqlite3.SQLITE_DENY)
    try:
        got = db.execute(sql.strip().rstrip(";")).fetchall()
    except sqlite3.Error as e:
        sys.exit(f"query failed on {path}: {e}")
    if [tuple(r) for r in got] != want:
        sys.exit(f"mismatch on {path}:\n got {got}\n want {want}")
print("ok")

"""Event generator and reference sessionizer for the jsonl-sessionize task."""
import datetime as dt
import json
import random


def generate(seed: int, n: int) -> str:
    r = random.Random(seed)
    users = [f"user{r.randint(1, 99)}" for _ in range(5)]
    t0 = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.timezone.utc)
    clock = {u: t0 + dt.timedelta(minutes=r.randint(0, 90)) for u in users}
    lines = []
    for _ in range(n):
        u = r.choice(users)
        clock[u] += dt.timedelta(seconds=r.choice([5, 60, 600, 1799, 1800, 1801, 3600, 7200]))
        lines.append(json.dumps({"user": u, "ts": clock[u].strftime("%Y-%m-%dT%H:%M:%SZ"),
                                 "event": r.choice(["view", "click", "buy"])}))
    r.shuffle(lines)
    lines[3:3] = ['{"user": "bad", "ts": ', '{"event": "click", "ts": "2024-05-01T09:00:00Z"}', "[]"]
    return "\n".join(lines) + "\n"


def sessionize(text: str) -> str:
    per: dict[str, list[dt.datetime]] = {}
    for line in text.splitlines():
        try:
            o = json.loads(line)
            u, ts = o["user"], o["ts"]
            t = dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(u, str):
            continue
        per.setdefault(u, []).append(t)
    rows = ["user,start,end,events,duration_sec"]
    for u in sorted(per):
        ts = sorted(per[u])
        start = prev = ts[0]
        count = 1
        for t in ts[1:] + [None]:
            if t is not None and (t - prev).total_seconds() <= 1800:
                prev, count = t, count + 1
                continue
            rows.append(f"{u},{start:%Y-%m-%dT%H:%M:%SZ},{prev:%Y-%m-%dT%H:%M:%SZ},{count},"
                        f"{int((prev - start).total_seconds())}")
            if t is not None:
                start = prev = t
                count = 1
    return "\n".join(rows) + "\n"
